//! Work spread over threads: the batch conversions and the exports of a merge.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The number of parallel jobs: `-j N`, else every core.
pub fn default_jobs(jobs: Option<usize>) -> usize {
    jobs.filter(|&j| j > 0).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// Run `f` over `items` on up to `jobs` threads; results in input order.
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(i, item);
                    results.lock().unwrap()[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_keeps_order() {
        let v: Vec<usize> = (0..50).collect();
        assert_eq!(
            parallel_map(&v, 4, |_, x| x * 2),
            (0..50).map(|x| x * 2).collect::<Vec<_>>()
        );
        assert!(parallel_map(&Vec::<usize>::new(), 4, |_, x| *x).is_empty());
    }
}
