//! What to convert: event types, NVTX names, a time window, processes and GPUs.
//!
//! A selection is applied inside the SQL that reads each table and the SQL that links launches
//! to GPU work, so flow arrows only ever join two selected slices and lanes are laid out over
//! exactly what is written.

use anyhow::{Result, bail};
use regex::Regex;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::category::{Category, EventType};

impl EventType {
    /// The `--types help` text: one line per type, then how to write a list.
    pub fn help() -> String {
        let width = EventType::ALL
            .iter()
            .map(|t| t.name().len())
            .max()
            .unwrap_or(0);
        let mut s = String::from("Event types for --types (comma-separated; default: all):\n");
        for t in EventType::ALL {
            s.push_str(&format!("  {:width$}  {}\n", t.name(), t.about()));
        }
        s.push_str(&format!("  {:width$}  every type above\n", "all"));
        s.push_str(
            "A type written -TYPE is left out: --types=-nvtx-gpu,-cpu-samples writes all but \
             those two.\n",
        );
        s
    }
}

impl EventType {
    /// What a plain conversion writes: everything, as Nsight Systems' timeline shows it by
    /// default (NVTX ranges projected onto the GPU included).
    pub fn defaults() -> BTreeSet<EventType> {
        EventType::ALL.into_iter().collect()
    }

    /// Parse a `--types` list; `all` means every type. `-TYPE` leaves a type out, of the
    /// defaults when the list starts with it (`-nvtx-gpu,-cpu-samples`).
    pub fn parse_list<S: AsRef<str>>(items: &[S]) -> Result<BTreeSet<EventType>> {
        let mut out = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let item = item.as_ref().trim();
            if let Some(name) = item.strip_prefix('-') {
                if i == 0 {
                    out = EventType::defaults();
                }
                out.remove(&name.parse()?);
            } else if item == "all" {
                out.extend(EventType::ALL);
            } else if !item.is_empty() {
                out.insert(item.parse()?);
            }
        }
        if out.is_empty() {
            bail!("--types names no event type");
        }
        Ok(out)
    }
}

impl FromStr for EventType {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        EventType::ALL
            .into_iter()
            .find(|t| t.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = EventType::ALL.iter().map(|t| t.name()).collect();
                anyhow::anyhow!(
                    "unknown event type '{s}' (known: {}, all; --types help describes them)",
                    names.join(", ")
                )
            })
    }
}

/// How NVTX ranges are matched by name.
#[derive(Debug, Clone)]
pub enum NameFilter {
    Prefix(String),
    Regex(Regex),
}

impl NameFilter {
    /// `re:PATTERN` is a regular expression; anything else is a name prefix.
    pub fn parse(s: &str) -> Result<NameFilter> {
        match s.strip_prefix("re:") {
            Some(re) => {
                Ok(NameFilter::Regex(Regex::new(re).map_err(|e| {
                    anyhow::anyhow!("bad --nvtx-filter regex: {e}")
                })?))
            }
            None => Ok(NameFilter::Prefix(s.to_string())),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            NameFilter::Prefix(p) => name.starts_with(p.as_str()),
            NameFilter::Regex(r) => r.is_match(name),
        }
    }

    /// Whether a range named `name` in NVTX domain `domain` (`None`: the default domain)
    /// matches under either of its names: the name the trace shows on the domain's track, or
    /// nsys' `Domain:name` of its reports (`nsys stats`, `stats`).
    pub fn matches_in(&self, domain: Option<&str>, name: &str) -> bool {
        self.matches(name) || domain.is_some_and(|d| self.matches(&format!("{d}:{name}")))
    }
}

/// A time window in ns relative to the capture start (nsys timestamps are already relative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub start: Option<i64>,
    pub end: Option<i64>,
}

impl TimeRange {
    /// Whether `ts` lies inside the window, both ends included.
    pub fn contains(&self, ts: i64) -> bool {
        self.start.is_none_or(|s| ts >= s) && self.end.is_none_or(|e| ts <= e)
    }
}

/// `1.5s`, `200ms`, `30us`, `100ns` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<i64> {
    let s = s.trim();
    let (num, scale) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(unit, scale)| s.strip_suffix(unit).map(|n| (n, *scale)))
    .unwrap_or((s, 1e9));
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("bad time '{s}' (use e.g. 2s, 350ms, 10us, 500ns)"))?;
    if !v.is_finite() || v < 0.0 {
        bail!("bad time '{s}': must be a non-negative number");
    }
    Ok((v * scale).round() as i64)
}

impl FromStr for TimeRange {
    type Err = anyhow::Error;
    /// `START..END`, either side optional: `2s..3.5s`, `..500ms`, `1s..`.
    fn from_str(s: &str) -> Result<Self> {
        let Some((a, b)) = s.split_once("..") else {
            bail!("bad time range '{s}': expected START..END, e.g. 2s..3.5s");
        };
        let start = (!a.trim().is_empty())
            .then(|| parse_duration(a))
            .transpose()?;
        let end = (!b.trim().is_empty())
            .then(|| parse_duration(b))
            .transpose()?;
        if let (Some(a), Some(b)) = (start, end)
            && b < a
        {
            bail!("bad time range '{s}': the end is before the start");
        }
        Ok(TimeRange { start, end })
    }
}

#[derive(Debug, Clone)]
pub struct Selection {
    pub types: BTreeSet<EventType>,
    pub nvtx_filter: Option<NameFilter>,
    pub time: Option<TimeRange>,
    pub pids: Vec<i64>,
    pub devices: Vec<i64>,
    /// Not a filter: colours given to NVTX ranges by name (`--nvtx-color-scheme`), first match
    /// wins, overriding the colour the program set.
    pub nvtx_colors: Vec<(Regex, u32)>,
    /// Not a filter: how a protobuf trace writes GPU work (`--gpu`).
    pub gpu: GpuModel,
}

/// How a protobuf trace writes kernels, memcpys and memsets (`--gpu`). JSON has no GPU model
/// of its own and always writes them as slices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuModel {
    /// Slices on a track per stream under each GPU's group, beside the GPU's NVTX, sync and
    /// memory tracks.
    #[default]
    Tracks,
    /// Perfetto's own GPU model: one `GpuRenderStageEvent` per operation, on a hardware queue
    /// per stream (trace_processor's `gpu_slice`, the UI's GPU plugins).
    Perfetto,
}

/// Parse `{"regex": "colour", ...}`: colours as `#rrggbb`, `0xrrggbb`, `0xaarrggbb` or a basic
/// name (red, green, blue, ...). Rules apply in the order written.
pub fn parse_color_scheme(json: &str) -> Result<Vec<(Regex, u32)>> {
    // serde_json keeps object keys sorted; read them in file order instead by scanning pairs.
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| anyhow::anyhow!("bad --nvtx-color-scheme JSON: {e}"))?;
    let Some(obj) = value.as_object() else {
        bail!("bad --nvtx-color-scheme: expected an object {{\"regex\": \"colour\", ...}}");
    };
    let mut keys: Vec<&String> = obj.keys().collect();
    // Order of appearance in the text (serde_json without preserve_order sorts keys).
    keys.sort_by_key(|k| {
        json.find(&serde_json::to_string(k).unwrap_or_default())
            .unwrap_or(usize::MAX)
    });
    let mut rules = Vec::new();
    for k in keys {
        let re = Regex::new(k)
            .map_err(|e| anyhow::anyhow!("bad --nvtx-color-scheme regex '{k}': {e}"))?;
        let Some(c) = obj[k].as_str() else {
            bail!("bad --nvtx-color-scheme: the colour for '{k}' must be a string");
        };
        rules.push((re, parse_color(c)?));
    }
    Ok(rules)
}

/// A colour as 0xRRGGBB.
pub fn parse_color(s: &str) -> Result<u32> {
    let t = s.trim().to_ascii_lowercase();
    let named = match t.as_str() {
        "red" => Some(0xff0000),
        "green" => Some(0x00a000),
        "blue" => Some(0x0000ff),
        "yellow" => Some(0xffff00),
        "orange" => Some(0xffa500),
        "purple" => Some(0x800080),
        "magenta" => Some(0xff00ff),
        "cyan" => Some(0x00ffff),
        "pink" => Some(0xffc0cb),
        "brown" => Some(0xa52a2a),
        "black" => Some(0x000000),
        "white" => Some(0xffffff),
        "grey" | "gray" => Some(0x808080),
        _ => None,
    };
    if let Some(c) = named {
        return Ok(c);
    }
    let hex = t
        .strip_prefix('#')
        .or_else(|| t.strip_prefix("0x"))
        .ok_or_else(|| anyhow::anyhow!("bad colour '{s}': use #rrggbb, 0xaarrggbb or a name"))?;
    if !(hex.len() == 6 || hex.len() == 8) {
        bail!("bad colour '{s}': use #rrggbb, 0xaarrggbb or a name");
    }
    let v = u32::from_str_radix(hex, 16).map_err(|_| anyhow::anyhow!("bad colour '{s}'"))?;
    Ok(v & 0xFF_FFFF)
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            types: EventType::defaults(),
            nvtx_filter: None,
            time: None,
            pids: Vec::new(),
            devices: Vec::new(),
            nvtx_colors: Vec::new(),
            gpu: GpuModel::default(),
        }
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types: Vec<_> = self.types.iter().map(|t| t.name()).collect();
        write!(f, "types {}", types.join(","))?;
        if let Some(n) = &self.nvtx_filter {
            match n {
                NameFilter::Prefix(p) => write!(f, ", NVTX names starting with '{p}'")?,
                NameFilter::Regex(r) => write!(f, ", NVTX names matching /{r}/")?,
            }
        }
        if let Some(t) = self.time {
            write!(f, ", time ")?;
            match t.start {
                Some(s) => write!(f, "{:.6}s", s as f64 / 1e9)?,
                None => write!(f, "start")?,
            }
            match t.end {
                Some(e) => write!(f, "..{:.6}s", e as f64 / 1e9)?,
                None => write!(f, "..end")?,
            }
        }
        if !self.pids.is_empty() {
            write!(f, ", pids {:?}", self.pids)?;
        }
        if !self.devices.is_empty() {
            write!(f, ", devices {:?}", self.devices)?;
        }
        Ok(())
    }
}

impl Selection {
    /// The default selection (a note in the summary says when it is not).
    pub fn is_everything(&self) -> bool {
        self.types == EventType::defaults()
            && self.nvtx_filter.is_none()
            && self.time.is_none()
            && self.pids.is_empty()
            && self.devices.is_empty()
    }

    pub fn wants(&self, t: EventType) -> bool {
        self.types.contains(&t)
    }

    /// Whether events of a category are wanted: the `--types` entry that selects it is (a
    /// category no entry selects, `--analyze`'s findings, is not the selection's to refuse).
    pub fn wants_category(&self, c: Category) -> bool {
        c.event_type().is_none_or(|t| self.wants(t))
    }

    /// SQL conditions (joined with AND, "1" when none) for a table aliased `alias` whose rows
    /// have `start`/`end`, a process in `id_col` (globalTid or globalPid) and optionally a
    /// device column. Rows are kept when they overlap the window.
    pub fn sql(
        &self,
        alias: &str,
        has_end: bool,
        id_col: Option<&str>,
        device_col: Option<&str>,
    ) -> String {
        let mut conds: Vec<String> = Vec::new();
        if let Some(t) = self.time {
            if let Some(s) = t.start {
                let end = if has_end {
                    format!("coalesce({alias}.\"end\", {alias}.start)")
                } else {
                    format!("{alias}.start")
                };
                conds.push(format!("{end} >= {s}"));
            }
            if let Some(e) = t.end {
                conds.push(format!("{alias}.start <= {e}"));
            }
        }
        if let Some(col) = id_col
            && !self.pids.is_empty()
        {
            let list: Vec<String> = self.pids.iter().map(|p| p.to_string()).collect();
            conds.push(format!(
                "(({alias}.\"{col}\" >> 24) & 16777215) IN ({})",
                list.join(",")
            ));
        }
        if let Some(col) = device_col
            && !self.devices.is_empty()
        {
            let list: Vec<String> = self.devices.iter().map(|d| d.to_string()).collect();
            conds.push(format!("{alias}.\"{col}\" IN ({})", list.join(",")));
        }
        if conds.is_empty() {
            "1".to_string()
        } else {
            conds.join(" AND ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_time_ranges_with_units() {
        let r: TimeRange = "2s..3.5s".parse().unwrap();
        assert_eq!(r.start, Some(2_000_000_000));
        assert_eq!(r.end, Some(3_500_000_000));
        let r: TimeRange = "..250ms".parse().unwrap();
        assert_eq!((r.start, r.end), (None, Some(250_000_000)));
        let r: TimeRange = "10us..".parse().unwrap();
        assert_eq!((r.start, r.end), (Some(10_000), None));
        assert!("3s..2s".parse::<TimeRange>().is_err());
        assert!("abc".parse::<TimeRange>().is_err());
        assert_eq!(parse_duration("1500ns").unwrap(), 1500);
    }

    #[test]
    fn name_filters() {
        assert!(NameFilter::parse("fwd").unwrap().matches("fwd:layer1"));
        assert!(!NameFilter::parse("fwd").unwrap().matches("bwd"));
        assert!(NameFilter::parse("re:^(fwd|bwd)$").unwrap().matches("bwd"));
        assert!(NameFilter::parse("re:(").is_err());
    }

    #[test]
    fn color_schemes() {
        let rules =
            parse_color_scheme(r##"{"^fwd": "#ff0000", "bwd": "blue", ".*": "0x80112233"}"##)
                .unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[0].0.as_str(), "^fwd");
        assert_eq!(rules[0].1, 0xff0000);
        assert_eq!(rules[1].1, 0x0000ff);
        assert_eq!(rules[2].1, 0x112233);
        assert!(parse_color_scheme("[1]").is_err());
        assert!(parse_color_scheme(r#"{"(": "red"}"#).is_err());
        assert!(parse_color("#12345").is_err());
    }

    #[test]
    fn sql_conditions() {
        let mut s = Selection::default();
        assert_eq!(s.sql("t", true, Some("globalTid"), None), "1");
        s.time = Some("1s..2s".parse().unwrap());
        s.pids = vec![42];
        s.devices = vec![1];
        let sql = s.sql("t", true, Some("globalPid"), Some("deviceId"));
        assert!(sql.contains("coalesce(t.\"end\", t.start) >= 1000000000"));
        assert!(sql.contains("t.start <= 2000000000"));
        assert!(sql.contains("IN (42)"));
        assert!(sql.contains("t.\"deviceId\" IN (1)"));
    }
}
