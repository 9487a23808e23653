//! How trace_processor reads a context switch's `prev_state`: by the kernel release the trace
//! names.

use nsys_perfetto_model::model::OffCpu;

/// How trace_processor reads `prev_state`: by the kernel release the trace names, with 4.4's
/// layout when it names none. Only the preemption flag moved between releases among the
/// states written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCodes {
    preempted: i64,
}

impl StateCodes {
    /// For a kernel release ("6.8.0-generic": 6.8), or 4.4's layout without one.
    pub fn for_kernel(version: Option<(u32, u32)>) -> StateCodes {
        let version = version.unwrap_or((4, 4));
        let preempted = if version >= (4, 14) {
            0x100 // TASK_REPORT_MAX
        } else if version >= (4, 8) {
            0x1000 // TASK_STATE_MAX with TASK_NEW
        } else {
            0x800
        };
        StateCodes { preempted }
    }

    /// `prev_state` of a thread leaving its CPU. A thread that left for a reason the export
    /// does not record (most exports) reads as sleeping ("S"): it was off its CPU, and nothing
    /// says it waited for one (Runnable would claim CPU contention the data does not show).
    pub fn prev_state(self, off: OffCpu) -> i64 {
        match off {
            OffCpu::Unknown | OffCpu::Sleeping => 0x1,
            OffCpu::Preempted => self.preempted,
            OffCpu::Runnable => 0,
            OffCpu::Uninterruptible => 0x2,
            OffCpu::Stopped => 0x4,
            OffCpu::Exited => 0x10, // EXIT_DEAD
        }
    }
}

/// `MAJOR.MINOR` of a kernel release ("6.8.0-generic": 6.8), parsed as trace_processor parses
/// `SystemInfo.utsname.release` (digits up to the first and the second dot); `None` where it
/// would find no version, and then decode `prev_state` as for 4.4.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
