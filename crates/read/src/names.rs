//! nsys' names that readers share: its tables of GPU activity, API calls and NVTX, and the kinds
//! of row of its NVTX table.

pub const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
pub const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
pub const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
pub const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
pub const DRIVER: &str = "CUPTI_ACTIVITY_KIND_DRIVER";
pub const NVTX: &str = "NVTX_EVENTS";
pub const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
/// The tables of MPI calls (each row a call with `start`, `end` and its name as `textId`).
pub const MPI_TABLES: [&str; 4] = [
    "MPI_P2P_EVENTS",
    "MPI_START_WAIT_EVENTS",
    "MPI_OTHER_EVENTS",
    "MPI_COLLECTIVES_EVENTS",
];

/// `NVTX_EVENTS.eventType`: the kinds of row the NVTX table holds, named once.
pub mod nvtx_type {
    /// A mark (an instant).
    pub const MARK: i64 = 34;
    /// A push/pop range: nests per thread.
    pub const PUSH_POP: i64 = 59;
    /// A start/end range: a free interval, may end on another thread.
    pub const START_END: i64 = 60;
    /// A push/pop range of an NVTXT file (`nsys`' text-file NVTX import), which nsys' reports
    /// count among the ranges.
    pub const NVTXT_PUSH_POP: i64 = 70;
    /// A start/end range of an NVTXT file.
    pub const NVTXT_START_END: i64 = 71;
    /// Rows that name things rather than being events: categories, thread names, domains.
    pub const NAMING: [i64; 4] = [CATEGORY, THREAD_NAME, DOMAIN_CREATE, DOMAIN_DESTROY];
    /// Names an NVTX category (`category`) of a domain: `text` is its name.
    pub const CATEGORY: i64 = 33;
    /// Names the thread of `globalTid`: `text` is its name.
    pub const THREAD_NAME: i64 = 39;
    /// Creates the domain `domainId`: `text` is its name.
    pub const DOMAIN_CREATE: i64 = 75;
    pub const DOMAIN_DESTROY: i64 = 76;
}
