//! Interrupts and litter: what a run leaves behind when it is stopped. The one place that handles
//! signals: every command, a server's included, goes through it, so an interrupt always stops the
//! children and removes the temporaries registered here, whoever else wants to wind down.
//!
//! * [`install`] (the command line calls it) catches SIGINT, SIGTERM and SIGHUP with a handler
//!   that only sets a flag. A watcher thread sees the flag, stops the child processes this run
//!   started (each in its own process group), removes every temporary file and directory it
//!   created, and exits with 128 + the signal number. The previous output is never touched:
//!   outputs are written to a temporary name and renamed only on success.
//! * Temporary names embed the process id (`.nsys-perfetto-<pid>-XXXXXX.part`,
//!   `$TMPDIR/nsys-perfetto-<pid>-XXXXXX/`, `.X.sqlite.<pid>.XXXXXX.part`), so after a SIGKILL
//!   (nothing runs then) the next run removes what a dead run left: only entries whose process
//!   is gone ([`remove_dead`]).
//! * While a command wants to handle an interrupt itself (`profile`: nsys gets the Ctrl-C too and
//!   writes the report), it calls [`defer`]; the flag is then polled with [`interrupted`].
//! * A server (`serve`, `open`) that stops on an interrupt and removes its own files takes
//!   [`stop_on_interrupt`]: the interrupt sets its stop flag instead of ending the process, and
//!   when the server has stopped, dropping the guard stops the children and removes the
//!   temporaries of the conversions it was running; the server then exits as it chooses.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static SIGNAL: AtomicI32 = AtomicI32::new(0);
static DEFER: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// A caller wound down after the interrupt itself ([`Interruptible`]): the watcher leaves it.
static HANDLED: AtomicBool = AtomicBool::new(false);

#[derive(Default)]
struct Registry {
    /// Temporary files and directories this process created (removed if it is interrupted).
    paths: Vec<PathBuf>,
    /// Process groups of running children.
    groups: Vec<i32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    paths: Vec::new(),
    groups: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: everything else happens on the watcher thread.
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// Catch SIGINT, SIGTERM and SIGHUP and start the watcher thread (once).
pub fn install() {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a plain sigaction with a handler that only stores into an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    std::thread::Builder::new()
        .name("interrupt-watcher".into())
        .spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(25));
                let sig = SIGNAL.load(Ordering::SeqCst);
                if sig != 0 && DEFER.load(Ordering::SeqCst) == 0 && !HANDLED.load(Ordering::SeqCst)
                {
                    clean_up_and_exit(sig);
                }
            }
        })
        .expect("start the interrupt watcher");
}

/// The signal received (SIGINT, SIGTERM, SIGHUP), if any.
pub fn interrupted() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// While the returned guard lives, an interrupt only sets the flag: the caller polls
/// [`interrupted`] and winds down itself (then calls [`clean_up_and_exit`]).
pub fn defer() -> DeferGuard {
    DEFER.fetch_add(1, Ordering::SeqCst);
    DeferGuard(())
}

pub struct DeferGuard(());

impl Drop for DeferGuard {
    fn drop(&mut self) {
        DEFER.fetch_sub(1, Ordering::SeqCst);
    }
}

/// While the returned guard lives, an interrupt sets `stop` (within 25 ms) instead of ending
/// the process. Dropping the guard after an interrupt stops the children and removes the
/// temporaries registered here (the process goes on: its caller returns its own exit status);
/// dropping it otherwise only ends the deferral. A thread still working after that sweep may
/// leave a temporary, named with the process id: the next run removes it ([`remove_dead`]).
pub fn stop_on_interrupt(stop: &Arc<AtomicBool>) -> Interruptible {
    install();
    let defer = defer();
    let stop = stop.clone();
    std::thread::Builder::new()
        .name("interrupt-stop".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if interrupted().is_some() {
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
        })
        .expect("start the interrupt watcher");
    Interruptible { _defer: defer }
}

/// See [`stop_on_interrupt`].
pub struct Interruptible {
    _defer: DeferGuard,
}

impl Drop for Interruptible {
    fn drop(&mut self) {
        // Runs before the deferral ends (fields drop after this): the watcher never sees an
        // interrupt this guard handles.
        if interrupted().is_some() {
            HANDLED.store(true, Ordering::SeqCst);
            sweep(&mut registry());
        }
    }
}

/// Stop the children, remove the temporaries, exit with 128 + `sig`.
pub fn clean_up_and_exit(sig: i32) -> ! {
    // Held until exit: no thread registers (or creates) a temporary after the sweep.
    let mut reg = registry();
    sweep(&mut reg);
    let name = match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    };
    crate::term::err(format_args!(
        "\ninterrupted ({name}): stopped; no partial output left, previous outputs untouched\n"
    ));
    std::process::exit(128 + sig)
}

/// Stop the children's process groups (SIGTERM, then SIGKILL after 1.5 s), remove the
/// temporaries, forget both.
fn sweep(reg: &mut Registry) {
    for &g in &reg.groups {
        // SAFETY: kill(2) on a process group this process created.
        unsafe { libc::kill(-g, libc::SIGTERM) };
    }
    if !reg.groups.is_empty() {
        let deadline = std::time::Instant::now() + Duration::from_millis(1500);
        while std::time::Instant::now() < deadline && reg.groups.iter().any(|&g| group_alive(g)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &g in &reg.groups {
            // SAFETY: as above.
            unsafe { libc::kill(-g, libc::SIGKILL) };
        }
    }
    for p in reg.paths.iter().rev() {
        remove_path(p);
    }
    reg.groups.clear();
    reg.paths.clear();
}

fn group_alive(g: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-g, 0) == 0 }
}

fn remove_path(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            // A thread may still be adding a file (SQLite): try again.
            for _ in 0..5 {
                if std::fs::remove_dir_all(p).is_ok() || !p.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// Run `create` (which makes a temporary file or directory and returns its path) so that an
/// interrupt either comes before it or finds the result registered for removal.
pub fn create<T, E>(
    create: impl FnOnce() -> Result<T, E>,
    path: impl Fn(&T) -> PathBuf,
) -> Result<T, E> {
    let mut reg = registry();
    let made = create()?;
    reg.paths.push(path(&made));
    Ok(made)
}

/// A new temporary directory in `$TMPDIR` named `{base}<pid>-...`: removed when dropped, and
/// registered with [`create`] so that an interrupt removes it too.
pub fn temp_dir(base: &str) -> std::io::Result<tempfile::TempDir> {
    create(
        || tempfile::Builder::new().prefix(&prefix(base)).tempdir(),
        |d| d.path().to_path_buf(),
    )
}

/// Register a path for removal on interrupt (an export lock file, a file a child writes).
pub fn register(path: &Path) {
    registry().paths.push(path.to_path_buf());
}

/// Forget a registered path (it was renamed into place, or removed).
pub fn forget(path: &Path) {
    let mut reg = registry();
    if let Some(i) = reg.paths.iter().rposition(|p| p == path) {
        reg.paths.remove(i);
    }
}

/// Spawn `cmd` in its own process group, registered to be stopped on interrupt.
pub fn spawn_group(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let mut reg = registry();
    let child = cmd.spawn()?;
    reg.groups.push(child.id() as i32);
    Ok(child)
}

/// Wait up to `at_most` for `child` to exit, and reap it if it did. Returns as soon as it
/// exits (its pidfd is polled), so a caller that checks for interrupts, timeouts or progress
/// between waits loses no time to a sleep; where the kernel has no pidfd, it sleeps a few
/// milliseconds at most.
pub fn wait_exit(
    child: &mut std::process::Child,
    at_most: std::time::Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    if let Some(status) = child.try_wait()? {
        return Ok(Some(status));
    }
    // SAFETY: pidfd_open(2) on a child this process has not reaped (its pid cannot be reused
    // yet); the descriptor is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if fd >= 0 {
        let fd = fd as libc::c_int;
        let mut pollfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = at_most.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd; the descriptor is ours to close. An early return (a
        // signal) is fine: the caller waits again.
        unsafe {
            libc::poll(&mut pollfd, 1, ms);
            libc::close(fd);
        }
    } else {
        std::thread::sleep(at_most.min(std::time::Duration::from_millis(5)));
    }
    child.try_wait()
}

/// Forget a child's process group (it ended).
pub fn forget_group(pid: u32) {
    registry().groups.retain(|&g| g != pid as i32);
}

/// Stop a child's whole process group (SIGKILL).
pub fn kill_group(pid: u32) {
    // SAFETY: kill(2) on a process group this process created.
    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
}

/// Whether process `pid` exists (EPERM: it exists, owned by someone else).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    if pid == std::process::id() {
        return true;
    }
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The prefix of this process's temporary names: `{base}{pid}-`.
pub fn prefix(base: &str) -> String {
    format!("{base}{}-", std::process::id())
}

/// Remove entries of `dir` named `{base}<pid>-...{suffix}` whose process is gone (a run killed
/// with SIGKILL, a power cut). Entries of live processes and other names are left alone; so are
/// entries not owned by this user.
pub fn remove_dead(dir: &Path, base: &str, suffix: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(base) else {
            continue;
        };
        if !name.ends_with(suffix) {
            continue;
        }
        let Some((pid, _)) = rest.split_once(['-', '.']) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        let path = e.path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.uid() == uid) {
            remove_path(&path);
        }
    }
}

/// The prefixes of this tool's directories in `$TMPDIR` (flow links, NVTX projection, exports
/// with `--no-cache`, `open`'s conversions).
pub const SCRATCH_PREFIXES: [&str; 4] = [
    "nsys-perfetto-",
    "nsys-perfetto-proj-",
    "nsys-perfetto-export-",
    "nsys-perfetto-open-",
];

/// Remove what dead runs left in `$TMPDIR` (once per process).
pub fn remove_dead_scratch() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let tmp = std::env::temp_dir();
        for p in SCRATCH_PREFIXES {
            remove_dead(&tmp, p, "");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_entries_go_live_ones_stay() {
        let t = tempfile::tempdir().unwrap();
        let me = std::process::id();
        // A pid that cannot exist (above pid_max on Linux).
        let dead = 0x3fff_fff0u32;
        for n in [
            format!(".nsys-perfetto-{dead}-abc.part"),
            format!(".nsys-perfetto-{me}-abc.part"),
            ".nsys-perfetto-abc.part".to_string(),
            format!(".nsys-perfetto-{dead}-abc.txt"),
        ] {
            std::fs::write(t.path().join(n), "").unwrap();
        }
        std::fs::create_dir(t.path().join(format!("nsys-perfetto-{dead}-xyz"))).unwrap();
        remove_dead(t.path(), ".nsys-perfetto-", ".part");
        remove_dead(t.path(), "nsys-perfetto-", "");
        let mut left: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            ".nsys-perfetto-abc.part".to_string(),
            format!(".nsys-perfetto-{dead}-abc.txt"),
            format!(".nsys-perfetto-{me}-abc.part"),
        ];
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn wait_exit_sees_an_exit_at_once_and_a_running_child_after_at_most() {
        use std::time::{Duration, Instant};
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        let started = Instant::now();
        let status = wait_exit(&mut quick, Duration::from_secs(20)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        let mut slow = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let started = Instant::now();
        let status = wait_exit(&mut slow, Duration::from_millis(100)).unwrap();
        let waited = started.elapsed();
        slow.kill().unwrap();
        slow.wait().unwrap();
        assert!(status.is_none());
        assert!(
            waited >= Duration::from_millis(5) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }
}
