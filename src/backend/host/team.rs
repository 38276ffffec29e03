//! Running the independent tasks of one kernel call (matmul tiles, attention heads) on the
//! calling thread and up to `threads - 1` pool workers.
//!
//! The calling thread works too, taking tasks from a shared counter like the helpers, and it
//! waits only for helpers that actually started a task. With rayon's `install`, the caller
//! sleeps until a worker has been scheduled, run everything and woken it: two thread wake-ups
//! per call (tens of microseconds on a busy machine, and a decode step makes ~200 calls), and
//! nothing at all gets done while the workers wait for a core. Here, if no helper gets a core
//! in time, the caller simply does every task itself.
//!
//! Which thread runs a task never changes what the task computes, so results do not depend on
//! the thread count.
//!
//! The helpers are one pool per process, shared by every model on the host backend: it is grown
//! to the largest thread count any model has asked for (never beyond `MAX_THREADS`; a larger
//! request is refused, not clamped), and each model's `threads` caps how many of its workers one
//! of that model's calls uses. A target and its draft model therefore never have more helper
//! threads between them than the larger of their two settings asks for. Growing replaces the
//! pool with a larger one; the old one's threads exit once the calls running on it finish.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{pass, MAX_THREADS};
use crate::error::{Error, Result, Status};

/// The process's helper threads.
struct Pool {
    pool: rayon::ThreadPool,
    helpers: usize,
}

/// The current pool; None until a model asks for more than one thread.
static SHARED: Mutex<Option<Arc<Pool>>> = Mutex::new(None);

/// Makes sure the shared pool has at least `helpers` threads.
fn reserve(helpers: usize) -> Result<()> {
    let mut shared = SHARED.lock();
    if helpers == 0 || shared.as_ref().is_some_and(|p| p.helpers >= helpers) {
        return Ok(());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(helpers)
        .thread_name(|i| format!("packlm-host-{}", i + 1))
        .build()
        .map_err(|e| Error::invalid(format!("cannot start {helpers} helper threads: {e}")))?;
    *shared = Some(Arc::new(Pool { pool, helpers }));
    Ok(())
}

/// Threads in all for a request of `threads` (0 = one per core), checked against the maximum.
fn resolve(threads: usize) -> Result<usize> {
    if threads > MAX_THREADS {
        return Err(Error::new(Status::ErrLimitExceeded, format!("threads {threads} is more than the maximum of {MAX_THREADS}")));
    }
    Ok(if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS) } else { threads })
}

/// One model's share of the process's threads.
pub(super) struct Team {
    /// Threads one call may use, the calling thread included.
    threads: AtomicUsize,
}

/// The task function with its lifetime erased (see `Team::run` for why that is sound).
type TaskPtr = *const (dyn Fn(usize) + Sync + 'static);

/// One `run` call, shared with the helpers it spawned.
struct Job {
    task: TaskPtr,
    n: usize,
    /// Next task to hand out.
    next: AtomicUsize,
    /// Set by the caller once every task has been handed out: a helper that starts later must
    /// not touch `task`.
    closed: AtomicBool,
    /// Helpers between "I may touch `task`" and "I am done with it".
    active: AtomicUsize,
    /// A task panicked on a helper.
    panicked: AtomicBool,
    /// The pass's abort flag: once set, no further task starts.
    stop: Option<Arc<AtomicBool>>,
    /// A task was skipped because of `stop`.
    skipped: AtomicBool,
}

// SAFETY: `task` points to a `Fn + Sync`, so calling it from several threads at once is allowed;
// the pointer itself is only dereferenced under the protocol described in `Team::run`.
unsafe impl Send for Job {}
// SAFETY: as above; every other field is atomic.
unsafe impl Sync for Job {}

impl Job {
    /// Takes and runs tasks until none are left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= self.n {
                return;
            }
            if self.stop.as_ref().is_some_and(|s| s.load(Relaxed)) {
                // Hand out the rest as skipped, so every thread stops at its next task.
                self.next.store(self.n, SeqCst);
                self.skipped.store(true, SeqCst);
                return;
            }
            // SAFETY: the caller of `Team::run` is still inside `run` (it cannot return before
            // `closed` is set and `active` is back to 0, and we are either the caller or a
            // helper counted in `active` that saw `closed` unset), so the closure `task` points
            // to is alive.
            unsafe { (*self.task)(i) };
        }
    }

    /// A helper's part: register, then work unless the caller has already closed the job.
    fn help(&self) {
        self.active.fetch_add(1, SeqCst);
        if !self.closed.load(SeqCst) && catch_unwind(AssertUnwindSafe(|| self.work())).is_err() {
            self.panicked.store(true, SeqCst);
        }
        self.active.fetch_sub(1, SeqCst);
    }
}

impl Team {
    /// `threads` in all, the calling thread included; 0 means one per core.
    pub(super) fn new(threads: usize) -> Result<Team> {
        let threads = resolve(threads)?;
        reserve(threads - 1)?;
        Ok(Team { threads: AtomicUsize::new(threads) })
    }

    pub(super) fn threads(&self) -> usize {
        self.threads.load(Relaxed)
    }

    /// Changes the cap for later calls (growing the shared pool if needed); on failure the cap
    /// is unchanged.
    pub(super) fn set_threads(&self, threads: usize) -> Result<()> {
        let threads = resolve(threads)?;
        reserve(threads - 1)?;
        self.threads.store(threads, Relaxed);
        Ok(())
    }

    /// Runs `task(i)` once for every `i < n` and returns when all have finished; `task` must
    /// not depend on which thread runs it. A panic in a task is raised again here. When the
    /// current pass's abort flag (backend::pass) is set, the tasks not yet started are skipped
    /// and `pass::note_cut_short` records it.
    ///
    /// Soundness of the lifetime erasure: helpers receive a raw pointer to `task`, which lives
    /// on the caller's stack. A helper increments `active`, then reads `closed`; it calls `task`
    /// only if `closed` was unset, and decrements `active` when done. The caller sets `closed`
    /// after the last task was handed out, then waits for `active == 0` before returning (or
    /// unwinding). All of it is SeqCst, so a helper whose increment comes after the caller's
    /// final read of `active` also reads `closed` after it was set, and never calls `task`.
    pub(super) fn run(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        let helpers = (self.threads() - 1).min(n.saturating_sub(1));
        let shared = if helpers > 0 { SHARED.lock().clone() } else { None };
        let stop = pass::current();
        let Some(shared) = shared else {
            for i in 0..n {
                if stop.as_ref().is_some_and(|s| s.load(Relaxed)) {
                    pass::note_cut_short();
                    return;
                }
                task(i);
            }
            return;
        };
        let (pool, helpers) = (&shared.pool, helpers.min(shared.helpers));
        // SAFETY: only the lifetime changes (a fat pointer to the same trait object); the
        // protocol above keeps every use inside this call.
        let task: TaskPtr = unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), TaskPtr>(task) };
        let job = Arc::new(Job {
            task,
            n,
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop,
            skipped: AtomicBool::new(false),
        });
        for _ in 0..helpers {
            let job = job.clone();
            pool.spawn(move || job.help());
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job.work()));
        job.closed.store(true, SeqCst);
        let mut spins = 0u32;
        while job.active.load(SeqCst) != 0 {
            // A helper is finishing a task it took: tasks are short, so spin a little first.
            spins += 1;
            if spins < 1 << 10 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if job.panicked.load(SeqCst) {
            panic!("a host backend task panicked on a helper thread");
        }
        if job.skipped.load(SeqCst) {
            pass::note_cut_short();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_exactly_once() {
        for threads in [1, 2, 3, 8] {
            let team = Team::new(threads).unwrap();
            for n in [0, 1, 2, 7, 100, 1000] {
                let counts: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                for _ in 0..20 {
                    team.run(n, &|i| {
                        counts[i].fetch_add(1, SeqCst);
                    });
                }
                assert!(counts.iter().all(|c| c.load(SeqCst) == 20), "threads={threads} n={n}");
            }
        }
    }

    #[test]
    fn a_team_uses_no_more_threads_than_its_cap() {
        // The shared pool has at least 3 helpers; teams capped lower use fewer.
        let _wide = Team::new(4).unwrap();
        for cap in [1, 2] {
            let team = Team::new(cap).unwrap();
            for _ in 0..20 {
                let ids = parking_lot::Mutex::new(std::collections::HashSet::new());
                team.run(32, &|_| {
                    ids.lock().insert(std::thread::current().id());
                    std::thread::sleep(std::time::Duration::from_micros(200));
                });
                assert!(ids.lock().len() <= cap, "cap {cap}: {} threads ran tasks", ids.lock().len());
            }
        }
    }

    #[test]
    fn a_panicking_task_panics_the_caller_after_the_others_finish() {
        let team = Team::new(3).unwrap();
        let done = AtomicU32::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(64, &|i| {
                if i == 40 {
                    panic!("task 40");
                }
                done.fetch_add(1, SeqCst);
            })
        }));
        assert!(r.is_err());
        // The team is still usable afterwards.
        let again = AtomicU32::new(0);
        team.run(10, &|_| {
            again.fetch_add(1, SeqCst);
        });
        assert_eq!(again.load(SeqCst), 10);
    }
}
