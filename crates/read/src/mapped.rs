//! Read-only file mappings whose lost pages become errors, not a signal. A file truncated while
//! it is mapped (nsys still writing its export, a network file system dropping it) makes a read
//! of a page past its new end raise SIGBUS, which kills the process without a word. A
//! [`Mapping`] is registered in a fixed table of atomics; the SIGBUS handler installed with the
//! first one puts a page of zeros in place of a lost page of a registered mapping, marks that
//! mapping and lets the read go on. Its reader looks at the mark ([`Mapping::lost_pages`])
//! before it trusts what it read, and fails with an error naming the file. A fault anywhere
//! else goes to the handler that was there before (Rust's stack-overflow report) or to the
//! default action, as if there were no handler.
//!
//! The handler neither allocates nor locks: it reads the table's atomics and calls `mmap`.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Mappings watched at once: an export's tables, for the few exports a process reads at a time.
/// A mapping made while every slot is taken is not made (see [`Mapping::new`]).
const SLOTS: usize = 4096;

struct Slot {
    taken: AtomicBool,
    /// The mapping's addresses; `start` 0 while the slot is being filled or emptied.
    start: AtomicUsize,
    end: AtomicUsize,
    lost: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    taken: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    lost: AtomicBool::new(false),
};

static SLOTS_IN_USE: [Slot; SLOTS] = [FREE; SLOTS];

/// The SIGBUS action before ours, and the page size, set once when ours is installed.
static PREVIOUS: OnceLock<(libc::sigaction, usize)> = OnceLock::new();

/// A read-only mapping of a file (or of a run of its bytes) watched for lost pages.
pub struct Mapping {
    map: memmap2::Mmap,
    slot: usize,
}

impl Mapping {
    /// Map `len` bytes of `file` from `offset` (`None`: the whole file), watched; `Ok(None)`
    /// when every slot is taken (the caller reads the bytes instead).
    pub fn new(
        file: &std::fs::File,
        range: Option<(u64, usize)>,
    ) -> std::io::Result<Option<Mapping>> {
        install();
        let Some(slot) = SLOTS_IN_USE.iter().position(|s| {
            s.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            return Ok(None);
        };
        let mut options = memmap2::MmapOptions::new();
        if let Some((offset, len)) = range {
            options.offset(offset).len(len);
        }
        // SAFETY: the mapping is read-only; a page the file loses while it is mapped reads as
        // zeros and marks the mapping (see the handler), which its reader looks at.
        let map = match unsafe { options.map(file) } {
            Ok(m) => m,
            Err(e) => {
                SLOTS_IN_USE[slot].taken.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let s = &SLOTS_IN_USE[slot];
        s.lost.store(false, Ordering::Relaxed);
        s.end
            .store(map.as_ptr() as usize + map.len(), Ordering::Relaxed);
        s.start.store(map.as_ptr() as usize, Ordering::Release);
        Ok(Some(Mapping { map, slot }))
    }

    /// Whether a page of the mapping was lost (the file truncated under it): what was read
    /// from it since may be zeros, not the file.
    pub fn lost_pages(&self) -> bool {
        SLOTS_IN_USE[self.slot].lost.load(Ordering::Acquire)
    }

    /// Give advice on how the mapping will be read.
    pub fn advise(&self, advice: memmap2::Advice) -> std::io::Result<()> {
        self.map.advise(advice)
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl std::ops::Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Mapping {
    /// The slot is freed before the mapping goes (its fields drop after this).
    fn drop(&mut self) {
        let s = &SLOTS_IN_USE[self.slot];
        s.start.store(0, Ordering::Release);
        s.end.store(0, Ordering::Relaxed);
        s.taken.store(false, Ordering::Release);
    }
}

/// Install the handler, once.
fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: plain calls to sigaction and sysconf with valid structures.
        unsafe {
            let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(4096);
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigbus as *const () as usize;
            // On the alternate stack where the thread has one: Rust's stack-overflow handler
            // (which ours forwards to) runs there.
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, &ours, &mut previous);
            (previous, page)
        }
    });
}

extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let Some((previous, page)) = PREVIOUS.get() else {
        return;
    };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &SLOTS_IN_USE {
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= s.end.load(Ordering::Relaxed) {
            continue;
        }
        let at = addr / page * page;
        // SAFETY: the page lies in a live read-only mapping of this process (its slot is freed
        // before it is unmapped); a private page of zeros takes the lost page's place.
        let zeros = unsafe {
            libc::mmap(
                at as *mut c_void,
                *page,
                libc::PROT_READ,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if zeros != libc::MAP_FAILED {
            s.lost.store(true, Ordering::Release);
            return;
        }
        break;
    }
    // SAFETY: the previous action, called as it was installed to be called.
    unsafe { forward(sig, info, context, previous) }
}

/// Give a fault that is not a lost page of a watched mapping to the action before ours.
unsafe fn forward(
    sig: c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
    previous: &libc::sigaction,
) {
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // The default action: back to it, and the faulting read runs again and raises it.
        // SAFETY: a valid zeroed sigaction asking for the default action.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
        return;
    }
    // SAFETY: `handler` is the address of a handler of the kind its flags say.
    unsafe {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(handler);
            f(sig, info, context);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(handler);
            f(sig);
        }
    }
}
