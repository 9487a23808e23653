//! The small lookup tables of an export, loaded once: strings, process and thread names, GPUs,
//! NVTX domains and categories, enum labels. Their size follows the number of distinct names
//! in a profile, not its length; the event tables themselves are streamed by the readers.

use super::enums::Enums;
use super::{NVTX, Schema, int_at, text_at};
use crate::model::{global_pid_of, pid_of, tid_of};
use anyhow::Result;
use rusqlite::Connection;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Default)]
pub struct ProfileInfo {
    pub strings: HashMap<i64, Box<str>>,
    /// globalTid -> thread name.
    pub thread_names: HashMap<i64, String>,
    /// globalPid -> process name (PROCESSES table).
    pub process_names: HashMap<i64, String>,
    /// deviceId -> GPU model name.
    pub gpu_names: BTreeMap<i64, String>,
    /// (globalPid, domainId) -> NVTX domain name.
    pub nvtx_domains: HashMap<(i64, i64), String>,
    /// (globalPid, domainId, category) -> NVTX category name.
    pub nvtx_categories: HashMap<(i64, i64, i64), String>,
    pub enums: Enums,
    /// Export metadata (EXPORT_PRODUCT_VERSION, EXPORT_SCHEMA_VERSION, ...), when present.
    pub export_meta: BTreeMap<String, String>,
}

impl ProfileInfo {
    pub fn load(conn: &Connection, schema: &Schema) -> Result<ProfileInfo> {
        let mut info = ProfileInfo {
            enums: Enums::load(conn, schema),
            ..Default::default()
        };
        if schema.has_columns("StringIds", &["id", "value"]) {
            each_row(conn, "SELECT id, value FROM StringIds", |r| {
                if let (Some(id), Some(v)) = (int_at(r, 0), text_at(r, 1)) {
                    info.strings.insert(id, v.into());
                }
            })?;
        }
        if schema.has_columns("ThreadNames", &["nameId", "globalTid"]) {
            let order = if schema.has_column("ThreadNames", "priority") {
                " ORDER BY priority"
            } else {
                ""
            };
            let sql = format!("SELECT globalTid, nameId FROM ThreadNames{order}");
            let strings = &info.strings;
            let names = &mut info.thread_names;
            each_row(conn, &sql, |r| {
                if let (Some(t), Some(n)) = (int_at(r, 0), int_at(r, 1))
                    && let Some(s) = strings.get(&n)
                {
                    names.insert(t, s.to_string());
                }
            })?;
        }
        if schema.has_columns("PROCESSES", &["globalPid", "name"]) {
            each_row(conn, "SELECT globalPid, name FROM PROCESSES", |r| {
                if let (Some(p), Some(n)) = (int_at(r, 0), text_at(r, 1))
                    && !n.is_empty()
                {
                    info.process_names.insert(global_pid_of(p), n.into_owned());
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
            if info.gpu_names.is_empty() && schema.has_columns(table, &[id_col, "name"]) {
                let sql = format!("SELECT \"{id_col}\", name FROM \"{table}\"");
                each_row(conn, &sql, |r| {
                    if let (Some(id), Some(n)) = (int_at(r, 0), text_at(r, 1)) {
                        info.gpu_names.entry(id).or_insert_with(|| n.into_owned());
                    }
                })?;
            }
        }
        for table in ["META_DATA_EXPORT", "EXPORT_META_DATA"] {
            if schema.has_columns(table, &["name", "value"]) {
                let sql = format!("SELECT name, value FROM \"{table}\"");
                each_row(conn, &sql, |r| {
                    if let (Some(k), Some(v)) = (text_at(r, 0), text_at(r, 1)) {
                        info.export_meta.insert(k.into_owned(), v.into_owned());
                    }
                })?;
            }
        }
        info.load_nvtx_names(conn, schema)?;
        Ok(info)
    }

    /// Domain (eventType 75), category (33) and thread-name (39) rows name things that the
    /// range rows refer to by number.
    fn load_nvtx_names(&mut self, conn: &Connection, schema: &Schema) -> Result<()> {
        if !schema.has_columns(NVTX, &["eventType", "globalTid"]) {
            return Ok(());
        }
        let sql = format!(
            "SELECT eventType, globalTid, {dom}, {cat}, text, {tid} FROM {NVTX} \
             WHERE eventType IN (33, 39, 75)",
            dom = schema.col(NVTX, "domainId"),
            cat = schema.col(NVTX, "category"),
            tid = schema.col(NVTX, "textId"),
        );
        let strings = &self.strings;
        let (domains, categories, threads) = (
            &mut self.nvtx_domains,
            &mut self.nvtx_categories,
            &mut self.thread_names,
        );
        each_row(conn, &sql, |r| {
            let ty = int_at(r, 0).unwrap_or(-1);
            let gtid = int_at(r, 1).unwrap_or(0);
            let domain = int_at(r, 2).unwrap_or(0);
            let name = text_at(r, 4).map(|s| s.into_owned()).or_else(|| {
                int_at(r, 5)
                    .and_then(|id| strings.get(&id))
                    .map(|s| s.to_string())
            });
            let Some(name) = name else { return };
            match ty {
                75 => {
                    domains.insert((global_pid_of(gtid), domain), name);
                }
                33 => {
                    if let Some(cat) = int_at(r, 3) {
                        categories.insert((global_pid_of(gtid), domain, cat), name);
                    }
                }
                39 => {
                    threads.entry(gtid).or_insert(name);
                }
                _ => {}
            }
        })?;
        Ok(())
    }

    pub fn string(&self, id: i64) -> Option<&str> {
        self.strings.get(&id).map(|s| &**s)
    }

    /// A string id's text, or "(string N)" when the export does not hold it (a dangling id is
    /// shown, not dropped).
    pub fn string_or_id(&self, id: i64) -> std::borrow::Cow<'_, str> {
        match self.string(id) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(format!("(string {id})")),
        }
    }

    pub fn thread_name(&self, global_tid: i64) -> String {
        match self.thread_names.get(&global_tid) {
            Some(n) => n.clone(),
            None => format!("Thread {}", tid_of(global_tid)),
        }
    }

    /// PROCESSES first; else the name of the main thread (tid == pid); else "Process N".
    pub fn process_name(&self, global_pid: i64) -> String {
        let gp = global_pid_of(global_pid);
        if let Some(n) = self.process_names.get(&gp) {
            return n.clone();
        }
        let main_thread = gp | pid_of(gp);
        if let Some(n) = self.thread_names.get(&main_thread) {
            return n.clone();
        }
        format!("Process {}", pid_of(gp))
    }

    /// "GPU 0 · NVIDIA H100 80GB HBM3", or "GPU 0" when the export does not describe it.
    pub fn gpu_label(&self, device: i64) -> String {
        match self.gpu_names.get(&device) {
            Some(n) => format!("GPU {device} · {n}"),
            None => format!("GPU {device}"),
        }
    }

    /// Default domain 0 is "NVTX", as nsys shows it.
    pub fn nvtx_domain_name(&self, global_pid: i64, domain: i64) -> String {
        if domain == 0 {
            return "NVTX".to_string();
        }
        match self.nvtx_domains.get(&(global_pid_of(global_pid), domain)) {
            Some(n) => n.clone(),
            None => format!("NVTX domain {domain}"),
        }
    }
}

fn each_row(conn: &Connection, sql: &str, mut f: impl FnMut(&rusqlite::Row<'_>)) -> Result<()> {
    let mut stmt = conn.prepare(sql)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        f(r);
    }
    Ok(())
}
