fn main() -> std::process::ExitCode {
    allocator_returns_large_blocks();
    nsys_perfetto::cli::main()
}

/// glibc serves a block above its mmap threshold with a mapping of its own, returned whole when
/// freed, but raises the threshold (up to 32 MB) to the size of each such block freed: after the
/// first output chunk or reorder window is freed, the next come from the heap, whose freed
/// megabytes stay with the process. A conversion allocates and frees such blocks throughout
/// (chunks on their way to the file, each reader's window), so its peak memory would count them
/// again and again: a fixed threshold keeps them mappings of their own.
fn allocator_returns_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable of glibc's allocator; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}
