//! nsys' SQL functions, as its reports and recipes use them: `median` (the mean of the two
//! middle values for an even count), `stdev` (the sample standard deviation, 0 for one value),
//! the quartiles, its rounding, and the grouping of NVTX names that differ only in counters.

use anyhow::Result;

/// nsys' `median`: the middle value, or the mean of the two middle ones; NULLs are ignored.
struct Median;

impl rusqlite::functions::Aggregate<Vec<f64>, Option<f64>> for Median {
    fn init(&self, _: &mut rusqlite::functions::Context<'_>) -> rusqlite::Result<Vec<f64>> {
        Ok(Vec::new())
    }
    fn step(
        &self,
        ctx: &mut rusqlite::functions::Context<'_>,
        acc: &mut Vec<f64>,
    ) -> rusqlite::Result<()> {
        if let Some(v) = number(ctx.get_raw(0)) {
            acc.push(v);
        }
        Ok(())
    }
    fn finalize(
        &self,
        _: &mut rusqlite::functions::Context<'_>,
        acc: Option<Vec<f64>>,
    ) -> rusqlite::Result<Option<f64>> {
        let Some(mut v) = acc.filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let n = v.len();
        let (_, hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
        let hi = *hi;
        if n % 2 == 1 {
            return Ok(Some(hi));
        }
        let lo = v[..n / 2].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Ok(Some((lo + hi) / 2.0))
    }
}

/// nsys' `lower_quartile` and `upper_quartile` (`QUARTILE_FN(x, 1)` and `QUARTILE_FN(x, 3)`):
/// of the n values in order, x[p] (1-based) at p = ceil(n k / 4), or the mean of x[p] and
/// x[p + 1] when n k / 4 is a whole number p and they differ. (nsys' SQLite averages the
/// distinct values whose rank reaches n k / 4 from below and n - n k / 4 from above.) NULLs are
/// ignored.
struct Quartile;

impl rusqlite::functions::Aggregate<(Vec<f64>, i64), Option<f64>> for Quartile {
    fn init(&self, _: &mut rusqlite::functions::Context<'_>) -> rusqlite::Result<(Vec<f64>, i64)> {
        Ok((Vec::new(), 0))
    }
    fn step(
        &self,
        ctx: &mut rusqlite::functions::Context<'_>,
        acc: &mut (Vec<f64>, i64),
    ) -> rusqlite::Result<()> {
        acc.1 = ctx.get(1)?;
        if let Some(v) = number(ctx.get_raw(0)) {
            acc.0.push(v);
        }
        Ok(())
    }
    fn finalize(
        &self,
        _: &mut rusqlite::functions::Context<'_>,
        acc: Option<(Vec<f64>, i64)>,
    ) -> rusqlite::Result<Option<f64>> {
        let Some((mut v, k)) = acc.filter(|(v, _)| !v.is_empty()) else {
            return Ok(None);
        };
        let n = v.len() as i64;
        let k = k.clamp(1, 3);
        // 1-based rank: ceil(n k / 4).
        let p = ((n * k + 3) / 4).max(1) as usize;
        let (_, at, _) = v.select_nth_unstable_by(p - 1, f64::total_cmp);
        let at = *at;
        if (n * k) % 4 != 0 || p as i64 >= n {
            return Ok(Some(at));
        }
        let next = v[p..].iter().copied().fold(f64::INFINITY, f64::min);
        Ok(Some((at + next) / 2.0))
    }
}

/// nsys' `stdev`: the sample standard deviation (n - 1); 0 for a single value or none.
struct Stdev;

/// (count, mean, sum of squared differences), Welford's running form.
type Welford = (u64, f64, f64);

impl rusqlite::functions::Aggregate<Welford, Option<f64>> for Stdev {
    fn init(&self, _: &mut rusqlite::functions::Context<'_>) -> rusqlite::Result<Welford> {
        Ok((0, 0.0, 0.0))
    }
    fn step(
        &self,
        ctx: &mut rusqlite::functions::Context<'_>,
        acc: &mut Welford,
    ) -> rusqlite::Result<()> {
        if let Some(x) = number(ctx.get_raw(0)) {
            acc.0 += 1;
            let d = x - acc.1;
            acc.1 += d / acc.0 as f64;
            acc.2 += d * (x - acc.1);
        }
        Ok(())
    }
    fn finalize(
        &self,
        _: &mut rusqlite::functions::Context<'_>,
        acc: Option<Welford>,
    ) -> rusqlite::Result<Option<f64>> {
        Ok(match acc {
            Some((n, _, m2)) if n > 1 => Some((m2 / (n - 1) as f64).sqrt()),
            // nsys gives 0 for one value, and for a group whose values are all NULL.
            Some(_) => Some(0.0),
            None => None,
        })
    }
}

fn number(v: rusqlite::types::ValueRef<'_>) -> Option<f64> {
    match v {
        rusqlite::types::ValueRef::Integer(i) => Some(i as f64),
        rusqlite::types::ValueRef::Real(r) => Some(r),
        _ => None,
    }
}

/// The aggregate functions the reports' SQL uses.
pub const MEDIAN_FN: &str = "nsys_perfetto_median";
/// Rounding as nsys' SQLite rounds: half away from zero on the value's 15 significant decimal
/// digits, so that 30726.35 (stored as 30726.3499999...) rounds to 30726.4.
pub const ROUND_FN: &str = "nsys_perfetto_round";

/// [`ROUND_FN`] in Rust.
pub fn nsys_round(x: f64, digits: i32) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits);
    let y: f64 = format!("{:.14e}", x * scale).parse().unwrap_or(x * scale);
    y.round() / scale
}
pub const STDEV_FN: &str = "nsys_perfetto_stdev";
/// `Quartile`: `QUARTILE_FN(x, 1)` is nsys' `lower_quartile(x)`, `QUARTILE_FN(x, 3)` its
/// `upper_quartile(x)`.
pub const QUARTILE_FN: &str = "nsys_perfetto_quartile";

/// Register [`MEDIAN_FN`] and [`STDEV_FN`] (and the NVTX grouping function) on a connection.
pub fn register_functions(conn: &rusqlite::Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_aggregate_function(MEDIAN_FN, 1, flags, Median)?;
    conn.create_aggregate_function(STDEV_FN, 1, flags, Stdev)?;
    conn.create_aggregate_function(QUARTILE_FN, 2, flags, Quartile)?;
    conn.create_scalar_function(ROUND_FN, 2, flags, |ctx| {
        let digits: i32 = ctx.get(1)?;
        Ok(number(ctx.get_raw(0)).map(|x| nsys_round(x, digits)))
    })?;
    register_group_name(conn)?;
    Ok(())
}

/// The SQL function that groups NVTX names ([`group_name`]).
pub const GROUP_NAME_FN: &str = "nsys_perfetto_group_name";

/// An NVTX name with its counters removed: every `, KEY = INTEGER` part after the first
/// (PyTorch's `, seq = 45328` and `, op_id = 990726`, a loop's `, step = 3`), so that
/// `aten::mul, seq = 45328, op_id = 990726` becomes `aten::mul`. Parts are separated by `", "`;
/// a KEY is a word (letters, digits, `_`; not starting with a digit). Other names are unchanged.
pub fn group_name(name: &str) -> std::borrow::Cow<'_, str> {
    fn counter(part: &str) -> bool {
        let Some((key, value)) = part.split_once(" = ") else {
            return false;
        };
        let digits = value.strip_prefix('-').unwrap_or(value);
        key.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
    }
    let mut parts = name.split(", ");
    let first = parts.next().unwrap_or("");
    if !parts.clone().any(counter) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = first.to_string();
    for p in parts.filter(|p| !counter(p)) {
        out.push_str(", ");
        out.push_str(p);
    }
    std::borrow::Cow::Owned(out)
}

/// Register [`GROUP_NAME_FN`] on a connection (NULL and non-text values pass through).
pub fn register_group_name(conn: &rusqlite::Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    use rusqlite::types::{Value, ValueRef};
    conn.create_scalar_function(
        GROUP_NAME_FN,
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            Ok(match ctx.get_raw(0) {
                ValueRef::Text(t) => {
                    let t = String::from_utf8_lossy(t);
                    Value::Text(group_name(&t).into_owned())
                }
                ValueRef::Integer(i) => Value::Integer(i),
                ValueRef::Real(f) => Value::Real(f),
                ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                ValueRef::Null => Value::Null,
            })
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nsys' quartiles on values inserted as `v`: (lower, upper).
    fn quartiles(v: &[i64]) -> (f64, f64) {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        register_functions(&conn).unwrap();
        conn.execute_batch("CREATE TABLE t(x INTEGER)").unwrap();
        for x in v {
            conn.execute("INSERT INTO t VALUES (?1)", [x]).unwrap();
        }
        conn.query_row(
            &format!("SELECT {QUARTILE_FN}(x, 1), {QUARTILE_FN}(x, 3) FROM t"),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    #[test]
    fn quartiles_are_nsys() {
        // The value at rank ceil(n k / 4); the mean of two when n k / 4 is whole.
        assert_eq!(quartiles(&[7]), (7.0, 7.0));
        assert_eq!(quartiles(&[6016, 34272]), (6016.0, 34272.0));
        assert_eq!(quartiles(&[4, 1, 3, 2]), (1.5, 3.5));
        assert_eq!(quartiles(&[5, 1, 4, 2, 3]), (2.0, 4.0));
        assert_eq!(quartiles(&[1, 1, 1, 9]), (1.0, 5.0));
    }
}
