//! The small lookup tables of an export, loaded once: strings, process and thread names, GPUs,
//! NVTX domains and categories, enum labels. Their size follows the number of distinct names
//! in a profile, not its length; the event tables themselves are streamed by the readers.

use super::arrow::scan::KeyScan;
use super::cells::{int_at, text_at};
use super::contexts::Contexts;
use super::enums::Enums;
use super::names::NVTX;
use super::names::nvtx_type::{CATEGORY, DOMAIN_CREATE, THREAD_NAME};
use super::scan::{Row, Scan};
use super::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::model::{Description, StringTable, global_pid_of};
use rusqlite::Connection;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

/// What the readers know of an export besides its event rows: the neutral [`Description`]
/// handed to layout and writers, plus nsys' own labels (enums, NVTX categories).
#[derive(Debug, Default)]
pub struct ProfileInfo {
    pub desc: Arc<Description>,
    /// (globalPid, domainId, category) -> NVTX category name.
    pub nvtx_categories: HashMap<(i64, i64, i64), String>,
    pub enums: Enums,
    /// The job rank the profiled program ran as, from the launcher's environment variables.
    pub rank: Option<i64>,
    /// The device of each CUDA context (its list per device is in the description).
    pub contexts: Contexts,
    /// Every name any thread had, in the order read: each `ThreadNames` row and each NVTX
    /// thread-naming row ([`THREAD_NAME`]), where the description keeps one name a thread (a
    /// thread named "MPI Rank 3" by MPI tracing may show as the program's name).
    pub every_thread_name: Vec<String>,
}

/// The rank an MPI or distributed launcher gave the profiled process, from the environment
/// nsys recorded (`;`- or NUL-separated `NAME=value`): Open MPI, MPICH/PMI, Slurm, PyTorch.
pub fn rank_from_environment(env: &str) -> Option<i64> {
    const KEYS: [&str; 6] = [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "MV2_COMM_WORLD_RANK",
        "SLURM_PROCID",
        "RANK",
    ];
    let vars: Vec<(&str, &str)> = env
        .split(['\0', ';'])
        .filter_map(|kv| kv.split_once('='))
        .collect();
    KEYS.iter().find_map(|k| {
        vars.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.trim().parse().ok())
    })
}

/// The `uname -m` name of an architecture as nsys records it (`CpuArchitecture`,
/// `HardwarePlatform`): "x86_64", "aarch64"; `None` for a value that names none.
pub fn machine_of(arch: &str) -> Option<&'static str> {
    match arch.trim().to_ascii_lowercase().as_str() {
        "x86_64" | "amd64" | "x64" | "x86-64" => Some("x86_64"),
        "aarch64" | "arm64" | "armv8" | "arm64-v8a" | "aarch64_be" => Some("aarch64"),
        "i386" | "i686" | "x86" => Some("i686"),
        "armv7l" | "armv7" | "armeabi-v7a" => Some("armv7l"),
        _ => None,
    }
}

/// The architecture a kernel release names, as some distributions' builds do
/// ("4.18.0-348.el8.x86_64", "5.10.120-tegra").
pub fn machine_in_release(release: &str) -> Option<&'static str> {
    let r = release.to_ascii_lowercase();
    if r.contains("x86_64") || r.contains("amd64") {
        Some("x86_64")
    } else if r.contains("aarch64") || r.contains("arm64") || r.contains("tegra") {
        Some("aarch64")
    } else {
        None
    }
}

impl ProfileInfo {
    /// Read from the export that `conn` opened, with its `enums` (loaded when it was opened).
    pub fn load(conn: &Connection, schema: &Schema, enums: Enums) -> Result<ProfileInfo> {
        let mut info = ProfileInfo {
            enums,
            ..Default::default()
        };
        let mut desc = Description::default();
        let strings: Option<Box<dyn StringTable>> = schema
            .has_columns("StringIds", &["id", "value"])
            .then(|| string_table(conn, schema))
            .transpose()?;
        if schema.has_columns("ThreadNames", &["nameId", "globalTid"]) {
            // By priority (NULL first, ties in storage order), sorted here: the table holds a
            // row a thread name.
            let scan =
                Scan::new(schema, "ThreadNames").cols(schema, &["priority", "globalTid", "nameId"]);
            let mut rows: Vec<(Option<i64>, i64, i64)> = Vec::new();
            each_row(conn, schema, &scan, |r| {
                if let (Some(t), Some(n)) = (int_at(r, 1), int_at(r, 2)) {
                    rows.push((int_at(r, 0), t, n));
                }
            })?;
            rows.sort_by_key(|&(priority, _, _)| priority);
            for (_, t, n) in rows {
                if let Some(s) = strings.as_ref().and_then(|st| st.get(n)) {
                    info.every_thread_name.push(s.to_string());
                    desc.thread_names.insert(t, s.to_string());
                }
            }
        }
        if schema.has_columns("PROCESSES", &["globalPid", "name"]) {
            let scan = Scan::new(schema, "PROCESSES").cols(schema, &["globalPid", "name"]);
            each_row(conn, schema, &scan, |r| {
                // Reports launched through nsys name the application's process after nsys'
                // launcher; nsys itself shows the program (the main thread's name) instead.
                if let (Some(p), Some(n)) = (int_at(r, 0), text_at(r, 1))
                    && !n.is_empty()
                    && n != "nsys-launcher"
                {
                    desc.process_names.insert(global_pid_of(p), n.into_owned());
                }
            })?;
        }
        // CUPTI rows name GPUs by CUDA device number: `cuDevice` where the export has it
        // (`TARGET_INFO_GPU.id` is nsys's own numbering and can differ), else the older keys.
        for (table, id_col) in [
            ("TARGET_INFO_GPU", "cuDevice"),
            ("TARGET_INFO_GPU", "id"),
            ("TARGET_INFO_GPU", "deviceId"),
            ("TARGET_INFO_CUDA_GPU", "deviceId"),
        ] {
            if desc.gpu_names.is_empty() && schema.has_columns(table, &[id_col, "name"]) {
                // The other facts where the table has them (nsys 2021.3 and newer), as NULL
                // where it does not.
                let scan = Scan::new(schema, table).cols(
                    schema,
                    &[
                        id_col,
                        "name",
                        "computeMajor",
                        "computeMinor",
                        "chipName",
                        "uuid",
                        "busLocation",
                        "threadsPerWarp",
                        "maxWarpsPerSm",
                        "maxBlocksPerSm",
                        "maxRegistersPerSm",
                        "maxRegistersPerBlock",
                        "maxShmemPerSm",
                        "maxShmemPerBlockOptin",
                    ],
                );
                each_row(conn, schema, &scan, |r| {
                    if let (Some(id), Some(n)) = (int_at(r, 0), text_at(r, 1)) {
                        desc.gpu_names.entry(id).or_insert_with(|| n.into_owned());
                        let text = |i| {
                            text_at(r, i)
                                .filter(|t| !t.is_empty())
                                .map(|t| t.into_owned())
                        };
                        let facts = nsys_perfetto_model::model::GpuFacts {
                            arch: int_at(r, 2)
                                .zip(int_at(r, 3))
                                .filter(|&(major, _)| major > 0)
                                .map(|(major, minor)| format!("sm_{major}{minor}")),
                            chip: text(4),
                            uuid: text(5)
                                .and_then(|u| nsys_perfetto_model::model::GpuFacts::parse_uuid(&u)),
                            pci_bdf: text(6),
                            sm: sm_limits(r),
                        };
                        desc.gpu_facts.entry(id).or_insert(facts);
                    }
                })?;
            }
        }
        for table in ["META_DATA_EXPORT", "EXPORT_META_DATA"] {
            if schema.has_columns(table, &["name", "value"]) {
                let scan = Scan::new(schema, table).cols(schema, &["name", "value"]);
                each_row(conn, schema, &scan, |r| {
                    if let (Some(k), Some(v)) = (text_at(r, 0), text_at(r, 1)) {
                        desc.metadata.insert(k.into_owned(), v.into_owned());
                    }
                })?;
            }
        }
        if schema.has_column("TARGET_INFO_SESSION_START_TIME", "utcEpochNs") {
            let scan =
                Scan::new(schema, "TARGET_INFO_SESSION_START_TIME").col(schema, "utcEpochNs");
            // The first row's.
            let mut first = true;
            each_row(conn, schema, &scan, |r| {
                if std::mem::take(&mut first) {
                    desc.session_start_utc_ns = int_at(r, 0);
                }
            })?;
        }
        if schema.has_columns("TARGET_INFO_SYSTEM_ENV", &["name", "value"]) {
            let mut env = None;
            let (mut cpu_arch, mut platform) = (None, None);
            // A few rows, of which the names below are kept.
            let scan = Scan::new(schema, "TARGET_INFO_SYSTEM_ENV").cols(schema, &["name", "value"]);
            each_row(conn, schema, &scan, |r| {
                match (text_at(r, 0).as_deref(), text_at(r, 1)) {
                    (Some("Hostname"), Some(v)) if !v.is_empty() => {
                        desc.host = Some(v.into_owned());
                    }
                    (Some("DeviceEnvironment"), Some(v)) => env = Some(v.into_owned()),
                    (Some("SoftwareReleaseVersion"), Some(v)) if !v.is_empty() => {
                        desc.kernel_release = Some(v.into_owned());
                    }
                    (Some("CpuArchitecture"), Some(v)) => cpu_arch = Some(v.into_owned()),
                    (Some("HardwarePlatform"), Some(v)) => platform = Some(v.into_owned()),
                    _ => {}
                }
            })?;
            desc.machine = [cpu_arch.as_deref(), platform.as_deref()]
                .into_iter()
                .flatten()
                .find_map(machine_of)
                .or_else(|| desc.kernel_release.as_deref().and_then(machine_in_release))
                .map(str::to_string);
            info.rank = env.as_deref().and_then(rank_from_environment);
        }
        let nvtx_threads = load_nvtx_names(
            conn,
            schema,
            strings.as_deref(),
            &mut desc,
            &mut info.nvtx_categories,
            &mut info.every_thread_name,
        )?;
        name_by_program(&mut desc, &nvtx_threads);
        info.contexts = Contexts::load(conn, schema)?;
        desc.gpu_contexts = std::mem::take(&mut info.contexts.by_device);
        desc.strings = strings;
        info.desc = Arc::new(desc);
        Ok(info)
    }
}

/// Processes that the export does not name (no `PROCESSES` row, or nsys' launcher) are named
/// after their main thread; where the program named that thread through NVTX ("MPI Rank 4"),
/// that is not the program: nsys shows the process by its executable (`jacobi`), which its
/// other threads still carry as their OS name. The process is then named by the most common
/// name among threads that NVTX did not name (not the profiler's own "[NSys]" threads; the
/// lowest tid breaks a tie), and the NVTX name stays on the main thread.
fn name_by_program(desc: &mut Description, nvtx_threads: &HashMap<i64, String>) {
    let mut renamed: Vec<i64> = nvtx_threads
        .keys()
        .filter_map(|&gtid| {
            let gp = global_pid_of(gtid);
            let main = gp | nsys_perfetto_model::model::pid_of(gp);
            (gtid == main
                && !desc.process_names.contains_key(&gp)
                && desc.thread_names.get(&main) == nvtx_threads.get(&main))
            .then_some(gp)
        })
        .collect();
    if renamed.is_empty() {
        return;
    }
    renamed.sort_unstable();
    // (process, name) -> (threads so named, lowest tid).
    let mut counts: HashMap<(i64, &str), (usize, i64)> = HashMap::new();
    for (&gtid, name) in &desc.thread_names {
        let gp = global_pid_of(gtid);
        if renamed.binary_search(&gp).is_err()
            || nvtx_threads.contains_key(&gtid)
            || name.is_empty()
            || name.starts_with('[')
        {
            continue;
        }
        let c = counts.entry((gp, name.as_str())).or_insert((0, gtid));
        c.0 += 1;
        c.1 = c.1.min(gtid);
    }
    let mut best: HashMap<i64, (usize, i64, &str)> = HashMap::new();
    for ((gp, name), (n, low)) in counts {
        let b = best.entry(gp).or_insert((n, low, name));
        if (n, std::cmp::Reverse(low)) > (b.0, std::cmp::Reverse(b.1)) {
            *b = (n, low, name);
        }
    }
    let names: Vec<(i64, String)> = best
        .into_iter()
        .map(|(gp, (_, _, name))| (gp, name.to_string()))
        .collect();
    desc.process_names.extend(names);
}

/// Domain, category and thread-name rows ([`DOMAIN_CREATE`], [`CATEGORY`], [`THREAD_NAME`]) name
/// things that the range rows refer to by number. Returns the threads NVTX named, with their names.
fn load_nvtx_names(
    conn: &Connection,
    schema: &Schema,
    strings: Option<&dyn StringTable>,
    desc: &mut Description,
    categories: &mut HashMap<(i64, i64, i64), String>,
    every_thread_name: &mut Vec<String>,
) -> Result<HashMap<i64, String>> {
    let mut nvtx_threads = HashMap::new();
    {
        if !schema.has_columns(NVTX, &["eventType", "globalTid"]) {
            return Ok(nvtx_threads);
        }
        let scan = Scan::new(schema, NVTX)
            .cols(
                schema,
                &[
                    "eventType",
                    "globalTid",
                    "domainId",
                    "category",
                    "text",
                    "textId",
                ],
            )
            .only("eventType", &[CATEGORY, THREAD_NAME, DOMAIN_CREATE]);
        let (domains, threads) = (&mut desc.nvtx_domains, &mut desc.thread_names);
        each_row(conn, schema, &scan, |r| {
            let ty = int_at(r, 0).unwrap_or(-1);
            let gtid = int_at(r, 1).unwrap_or(0);
            let domain = int_at(r, 2).unwrap_or(0);
            let name = text_at(r, 4).map(|s| s.into_owned()).or_else(|| {
                int_at(r, 5)
                    .and_then(|id| strings?.get(id))
                    .map(|s| s.to_string())
            });
            let Some(name) = name else { return };
            match ty {
                DOMAIN_CREATE => {
                    domains.insert((global_pid_of(gtid), domain), name);
                }
                CATEGORY => {
                    if let Some(cat) = int_at(r, 3) {
                        categories.insert((global_pid_of(gtid), domain, cat), name);
                    }
                }
                THREAD_NAME => {
                    every_thread_name.push(name.clone());
                    threads.entry(gtid).or_insert_with(|| name.clone());
                    nvtx_threads.insert(gtid, name);
                }
                _ => {}
            }
        })?;
        Ok(nvtx_threads)
    }
}

/// A GPU's SM limits from a `TARGET_INFO_GPU` row as `ProfileInfo::load` selects it (compute
/// capability at 2 and 3, the limits from 7 on), where every one is recorded and positive.
fn sm_limits(r: &Row<'_>) -> Option<nsys_perfetto_model::model::SmLimits> {
    let at = |i| int_at(r, i).filter(|&v| v > 0);
    Some(nsys_perfetto_model::model::SmLimits {
        compute: (at(2)?, int_at(r, 3)?),
        warp_size: at(7)?,
        max_warps_per_sm: at(8)?,
        max_blocks_per_sm: at(9)?,
        max_registers_per_sm: at(10)?,
        max_registers_per_block: at(11)?,
        max_shared_memory_per_sm: at(12)?,
        max_shared_memory_per_block: at(13)?,
    })
}

fn each_row(
    conn: &Connection,
    schema: &Schema,
    scan: &Scan,
    mut f: impl FnMut(&Row<'_>),
) -> Result<()> {
    let mut rows = scan.open(conn, schema)?;
    while let Some(r) = rows.next()? {
        f(&r);
    }
    Ok(())
}

/// The export's `StringIds`, looked up by id when a name is first needed (a primary-key lookup
/// each), with a bounded cache: a profile's string table can hold hundreds of MB of names the
/// trace never uses.
pub struct SqliteStrings {
    conn: Mutex<(Connection, StringCache)>,
}

/// Looked-up strings by id (`None`: the id is not in the table).
type StringCache = HashMap<i64, Option<Box<str>>>;

/// `StringIds` looked up by id where `id` is the table's key (every real export), else (an
/// edited export, where each lookup would scan the table) read whole.
fn string_table(conn: &Connection, schema: &Schema) -> Result<Box<dyn StringTable>> {
    if let Some(direct) = Scan::new(schema, "StringIds")
        .col(schema, "value")
        .key_scan(schema, "id")?
    {
        return Ok(Box::new(KeyedStrings(direct)));
    }
    let keyed: bool = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('StringIds') \
             WHERE name = 'id' AND pk = 1 AND upper(type) = 'INTEGER'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n == 1)
        .unwrap_or(false)
        && conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('StringIds') WHERE pk > 0",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n == 1)
            .unwrap_or(false);
    if keyed {
        return Ok(Box::new(SqliteStrings::open(&schema.path)?));
    }
    let mut all: HashMap<i64, Box<str>> = HashMap::new();
    let scan = Scan::new(schema, "StringIds").cols(schema, &["id", "value"]);
    each_row(conn, schema, &scan, |r| {
        if let (Some(id), Some(v)) = (int_at(r, 0), text_at(r, 1)) {
            all.entry(id).or_insert_with(|| v.into());
        }
    })?;
    Ok(Box::new(all))
}

/// An Arrow export's `StringIds`, each lookup a binary search of its typed columns (the first
/// row of an id, as where the table is read whole).
struct KeyedStrings(KeyScan);

impl StringTable for KeyedStrings {
    fn get(&self, id: i64) -> Option<Box<str>> {
        let row = self.0.rows(id).ok()?.next()?;
        text_at(&self.0.row(row), 0).map(Into::into)
    }
}

/// Strings kept between lookups; the cache starts over when full.
const STRING_CACHE: usize = 1 << 16;

impl SqliteStrings {
    pub fn open(path: &std::path::Path) -> Result<SqliteStrings> {
        let conn = super::connection::open_readonly(path)?;
        Ok(SqliteStrings {
            conn: Mutex::new((conn, HashMap::new())),
        })
    }
}

impl StringTable for SqliteStrings {
    fn get(&self, id: i64) -> Option<Box<str>> {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let (conn, cache) = &mut *guard;
        if let Some(v) = cache.get(&id) {
            return v.clone();
        }
        let value: Option<Box<str>> = conn
            .prepare_cached("SELECT value FROM StringIds WHERE id = ?1")
            .ok()
            .and_then(|mut stmt| {
                let mut rows = stmt.query([id]).ok()?;
                let row = rows.next().ok()??;
                text_at(row, 0).map(|s| s.into())
            });
        if cache.len() >= STRING_CACHE {
            cache.clear();
        }
        cache.insert(id, value.clone());
        value
    }
}
