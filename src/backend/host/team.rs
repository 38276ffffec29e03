//! Running the independent tasks of one kernel call (matmul tiles, attention heads) on the
//! calling thread and up to `threads - 1` pool helpers.
//!
//! The calling thread works too, taking tasks from a shared counter like the helpers, and it
//! waits only for helpers that actually started a task: if no helper gets a core in time, the
//! caller simply does every task itself.
//!
//! A pass makes some 200-300 calls, a few to a few tens of microseconds apart, so the helpers
//! wait for the next call spinning, not sleeping: a helper woken from a futex arrives late for
//! calls this short. With helpers that slept between calls (a rayon pool), a second thread
//! gained little on a verify, on a machine where two single-threaded processes each kept their
//! full speed (docs/benchmarks/verify.md, "At 2 threads"). A helper spins
//! (`spin_loop`) for `SPIN`, then yields its core between looks until `SPIN_YIELDING`, then
//! sleeps on a condition variable until the next call: an idle host costs a helper about a
//! millisecond of one core after each pass, not more. While it waits, a helper does pieces of
//! the backend's own work of a few microseconds each instead of only spinning (`idle_work`:
//! the interleaved copies' writing, packed/), looking at the queue between pieces.
//!
//! Which thread runs a task never changes what the task computes, so results do not depend on
//! the thread count.
//!
//! The helpers are one pool per process, shared by every model on the host backend: it is grown
//! to the largest thread count any model has asked for (never beyond `MAX_THREADS`; a larger
//! request is refused, not clamped), and each model's `threads` caps how many helpers one of
//! that model's calls asks for. A target and its draft model therefore never have more helper
//! threads between them than the larger of their two settings asks for. The helpers live as
//! long as the process.

use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::{pass, MAX_THREADS};
use crate::error::{Error, Result, Status};

/// How long an idle helper spins on the queue before it starts yielding its core.
const SPIN: Duration = Duration::from_micros(100);
/// How long an idle helper looks at the queue at all before it sleeps.
const SPIN_YIELDING: Duration = Duration::from_millis(1);

/// The process's helper threads and the calls waiting for them.
struct Pool {
    state: Mutex<PoolState>,
    /// Entries in `state.queue`, readable without the lock by spinning helpers.
    queued: AtomicUsize,
    /// Signalled when entries are queued while helpers sleep.
    wake: Condvar,
    /// Helper threads started; only grows. Changed under `grow`.
    helpers: AtomicUsize,
    /// Held while helpers are being started.
    grow: Mutex<()>,
}

struct PoolState {
    /// One entry per helper a call asked for.
    queue: VecDeque<Arc<Job>>,
    /// Helpers sleeping on `wake`.
    sleeping: usize,
}

static POOL: Pool = Pool {
    state: Mutex::new(PoolState { queue: VecDeque::new(), sleeping: 0 }),
    queued: AtomicUsize::new(0),
    wake: Condvar::new(),
    helpers: AtomicUsize::new(0),
    grow: Mutex::new(()),
};

/// Makes sure the pool has at least `helpers` threads.
fn reserve(helpers: usize) -> Result<()> {
    if POOL.helpers.load(Acquire) >= helpers {
        return Ok(());
    }
    let _g = POOL.grow.lock();
    while POOL.helpers.load(Acquire) < helpers {
        let i = POOL.helpers.load(Acquire);
        std::thread::Builder::new()
            .name(format!("packlm-host-{}", i + 1))
            .spawn(helper)
            .map_err(|e| Error::invalid(format!("cannot start {helpers} helper threads: {e}")))?;
        POOL.helpers.store(i + 1, Release);
    }
    Ok(())
}

/// A helper's life: take a call's entry, help with it, again.
fn helper() {
    loop {
        next_job().help();
    }
}

/// The next queued entry: spinning, then yielding, then sleeping until there is one.
fn next_job() -> Arc<Job> {
    let t = Instant::now();
    let mut looks = 0u32;
    let mut yielding = false;
    loop {
        if POOL.queued.load(Acquire) > 0 {
            if let Some(job) = take(&mut POOL.state.lock()) {
                return job;
            }
            continue;
        }
        // A piece of the backend's own work, in place of spinning (`idle_work`); its time
        // counts toward the spinning and yielding below.
        if idle_work() {
            continue;
        }
        looks = looks.wrapping_add(1);
        // The clock is read every 64 looks: about a microsecond apart while spinning.
        if looks.is_multiple_of(64) {
            let waited = t.elapsed();
            if waited >= SPIN_YIELDING {
                let mut st = POOL.state.lock();
                loop {
                    if let Some(job) = take(&mut st) {
                        return job;
                    }
                    st.sleeping += 1;
                    POOL.wake.wait(&mut st);
                    st.sleeping -= 1;
                }
            }
            yielding = waited >= SPIN;
        }
        if yielding {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Work of the backend's own that helpers do between calls instead of only spinning (the
/// interleaved copies' writing, packed/): each call does a piece of a few microseconds and says
/// whether it did one (Some(true)), has none now (Some(false)), or has none left (None: it is
/// dropped).
type IdleWork = Arc<dyn Fn() -> Option<bool> + Send + Sync>;

static IDLE_WORK: Mutex<Vec<IdleWork>> = Mutex::new(Vec::new());
/// Entries in `IDLE_WORK`, readable without the lock by spinning helpers.
static IDLE_PENDING: AtomicUsize = AtomicUsize::new(0);

/// Adds `work` for idle helpers (see `IdleWork`).
pub(super) fn add_idle_work(work: IdleWork) {
    let mut list = IDLE_WORK.lock();
    list.push(work);
    IDLE_PENDING.store(list.len(), Release);
}

/// One piece of idle work, where some is registered and no other helper is at it: whether a
/// piece was done. A piece that panics drops its work (the helper lives on).
fn idle_work() -> bool {
    if IDLE_PENDING.load(Acquire) == 0 {
        return false;
    }
    let Some(mut list) = IDLE_WORK.try_lock() else { return false };
    let mut did = false;
    list.retain(|work| {
        if did {
            return true;
        }
        match catch_unwind(AssertUnwindSafe(|| work())) {
            Ok(Some(wrote)) => {
                did = wrote;
                true
            }
            _ => false,
        }
    });
    IDLE_PENDING.store(list.len(), Release);
    did
}

/// The first queued entry, if any.
fn take(st: &mut PoolState) -> Option<Arc<Job>> {
    let job = st.queue.pop_front()?;
    POOL.queued.fetch_sub(1, Relaxed);
    Some(job)
}

/// Wide calls (made under [`wide`]) running with as many threads as the machine has cores, and
/// how many such calls have begun. Work of the backend's own that runs beside the passes (the
/// interleave writer, packed/) looks at them between its pieces ([`make_way`]): a thread that
/// takes a core from such a call holds up all of it, as the call's other threads spin until
/// the one that lost its core finishes its task.
static FULL_RUNNING: AtomicUsize = AtomicUsize::new(0);
static FULL_BEGUN: AtomicUsize = AtomicUsize::new(0);

/// How long no wide call may use every core before background work takes its next piece.
const QUIET: Duration = Duration::from_millis(1);
/// How long background work waits for a quiet moment at most, per piece: during continuous
/// decoding on every core it still moves on, at a cost to the passes of one piece per wait.
pub(super) const MAX_WAIT: Duration = Duration::from_millis(10);

/// The cores this process may run on.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

thread_local! {
    /// Whether this thread's calls are wide (`wide`).
    static WIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While the guard lives, this thread's calls that use every core keep background work off the
/// cores (`make_way`). The host backend makes its matmuls of many activation rows (prefill)
/// wide; decode and verify passes share the cores with the writer, so that the copies are done
/// soon after the open rather than whenever the passes pause.
pub(super) fn wide() -> Wide {
    Wide(WIDE.replace(true))
}

pub(super) struct Wide(bool);

impl Drop for Wide {
    fn drop(&mut self) {
        WIDE.set(self.0);
    }
}

/// Counts one wide call that uses every core while it lives (`FULL_RUNNING`), also while
/// unwinding.
struct FullCall;

impl FullCall {
    fn begin(threads: usize) -> Option<FullCall> {
        if threads < cores() || !WIDE.get() {
            return None;
        }
        FULL_RUNNING.fetch_add(1, SeqCst);
        FULL_BEGUN.fetch_add(1, SeqCst);
        Some(FullCall)
    }
}

impl Drop for FullCall {
    fn drop(&mut self) {
        FULL_RUNNING.fetch_sub(1, SeqCst);
    }
}

/// Waits for a moment when no wide call uses every core, for background work about to take its
/// next piece. Returns at once when no such call has begun since the last return (`*seen`, 0
/// at first) and none runs; otherwise once a sleep of `QUIET` passed with none begun and none
/// running, or after `max_wait` whatever the calls do. Which thread does what when never
/// changes a result, so this only moves time around.
pub(super) fn make_way(seen: &mut usize, max_wait: Duration) {
    let t = Instant::now();
    loop {
        let begun = FULL_BEGUN.load(SeqCst);
        if begun == *seen && FULL_RUNNING.load(SeqCst) == 0 {
            return;
        }
        *seen = begun;
        if t.elapsed() >= max_wait {
            return;
        }
        std::thread::sleep(QUIET);
    }
}

/// Jobs a thread keeps for its later calls (`JOBS`).
const KEPT_JOBS: usize = 8;

thread_local! {
    /// The calling thread's jobs of earlier `Team::run` calls, for the next ones.
    static JOBS: std::cell::RefCell<Vec<Arc<Job>>> = const { std::cell::RefCell::new(Vec::new()) };
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
        let helpers = (self.threads() - 1).min(n.saturating_sub(1)).min(POOL.helpers.load(Acquire));
        let stop = pass::current();
        let _full = FullCall::begin(helpers + 1);
        if helpers == 0 {
            for i in 0..n {
                if stop.as_ref().is_some_and(|s| s.load(Relaxed)) {
                    pass::note_cut_short();
                    return;
                }
                task(i);
            }
            return;
        }
        // SAFETY: only the lifetime changes (a fat pointer to the same trait object); the
        // protocol above keeps every use inside this call.
        let task: TaskPtr = unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), TaskPtr>(task) };
        let fresh = Job {
            task,
            n,
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            stop,
            skipped: AtomicBool::new(false),
        };
        // One of this thread's earlier jobs that no helper holds any more (a helper that took
        // an entry of a finished call late holds it for a moment): no allocation per call once
        // there are a few.
        let job = JOBS.with_borrow_mut(|jobs| {
            let mut fresh = Some(fresh);
            for job in jobs.iter_mut() {
                if let Some(j) = Arc::get_mut(job) {
                    *j = fresh.take().expect("one job");
                    return job.clone();
                }
            }
            let job = Arc::new(fresh.take().expect("one job"));
            if jobs.len() < KEPT_JOBS {
                jobs.push(job.clone());
            }
            job
        });
        {
            let mut st = POOL.state.lock();
            st.queue.extend(std::iter::repeat_n(&job, helpers).cloned());
            POOL.queued.fetch_add(helpers, Release);
            for _ in 0..st.sleeping.min(helpers) {
                POOL.wake.notify_one();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job.work()));
        job.closed.store(true, SeqCst);
        // Entries no helper took are withdrawn, so that no helper wakes for a finished call.
        {
            let mut st = POOL.state.lock();
            let before = st.queue.len();
            st.queue.retain(|j| !Arc::ptr_eq(j, &job));
            POOL.queued.fetch_sub(before - st.queue.len(), Relaxed);
        }
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

    /// Work added for idle helpers is done by them, on their own threads, between calls and
    /// without any call being made, until it says it has none left; then it is dropped. A
    /// piece that panics is dropped too, and the helper lives on to run the next call.
    #[test]
    fn idle_helpers_do_the_added_work_until_it_is_done() {
        let team = Team::new(2).unwrap();
        team.run(4, &|_| {});
        let caller = std::thread::current().id();
        let pieces = Arc::new(AtomicU32::new(0));
        let (count, others) = (pieces.clone(), Arc::new(parking_lot::Mutex::new(Vec::new())));
        let seen = others.clone();
        let work: IdleWork = Arc::new(move || {
            seen.lock().push(std::thread::current().id());
            (count.fetch_add(1, SeqCst) < 49).then_some(true)
        });
        let dropped = Arc::downgrade(&work);
        add_idle_work(work);
        let t = Instant::now();
        // A helper that has slept since its last call is woken by the next one: calls now and then.
        while dropped.strong_count() > 0 {
            assert!(t.elapsed() < Duration::from_secs(30), "{} pieces done in 30 s", pieces.load(SeqCst));
            team.run(2, &|_| {});
            std::thread::sleep(Duration::from_micros(300));
        }
        assert_eq!(pieces.load(SeqCst), 50, "pieces done before the work said it had none left");
        assert!(others.lock().iter().all(|&id| id != caller), "idle work ran on the calling thread");
        assert_eq!(others.lock().len(), 50);
        // A panicking piece: dropped, and the pool still runs calls.
        let panicked = Arc::new(AtomicU32::new(0));
        let p = panicked.clone();
        let work: IdleWork = Arc::new(move || {
            p.fetch_add(1, SeqCst);
            panic!("injected panic in idle work")
        });
        let dropped = Arc::downgrade(&work);
        add_idle_work(work);
        let t = Instant::now();
        while dropped.strong_count() > 0 {
            assert!(t.elapsed() < Duration::from_secs(30), "the panicking work was not dropped");
            team.run(2, &|_| {});
            std::thread::sleep(Duration::from_micros(300));
        }
        assert_eq!(panicked.load(SeqCst), 1);
        let ran = AtomicU32::new(0);
        team.run(64, &|_| {
            ran.fetch_add(1, SeqCst);
        });
        assert_eq!(ran.load(SeqCst), 64);
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
    fn background_work_waits_for_a_call_on_every_core_but_not_forever() {
        if cores() > MAX_THREADS {
            // No call can use every core: background work never waits.
            return;
        }
        let team = Team::new(cores()).unwrap();
        let _wide = wide();
        // A 20 ms wide call on every core: the waiter returns only after it ended, which the
        // tasks count inside the call (the call ends only after the last one). Other tests'
        // calls can only make it wait longer; its own bound is far off.
        let (finished, started) = (AtomicUsize::new(0), AtomicBool::new(false));
        let ended_when_returned = std::thread::scope(|sc| {
            let waiter = sc.spawn(|| {
                while !started.load(SeqCst) {
                    std::thread::yield_now();
                }
                let mut seen = FULL_BEGUN.load(SeqCst).wrapping_sub(1);
                make_way(&mut seen, Duration::from_secs(60));
                finished.load(SeqCst) == cores()
            });
            team.run(cores(), &|_| {
                started.store(true, SeqCst);
                std::thread::sleep(Duration::from_millis(20));
                finished.fetch_add(1, SeqCst);
            });
            waiter.join().unwrap()
        });
        assert!(ended_when_returned, "make_way returned while a call on every core ran");

        // Wide calls on every core back to back, for up to 60 s: the waiter still returns, after
        // its bound of 50 ms, while they go on.
        let done = AtomicBool::new(false);
        let stream_ran = std::thread::scope(|sc| {
            let stream = sc.spawn(|| {
                let t = Instant::now();
                let _wide = wide();
                while !done.load(SeqCst) && t.elapsed() < Duration::from_secs(60) {
                    team.run(cores(), &|_| std::thread::sleep(Duration::from_micros(200)));
                }
                done.load(SeqCst)
            });
            let mut seen = 0;
            make_way(&mut seen, Duration::from_millis(50));
            done.store(true, SeqCst);
            stream.join().unwrap()
        });
        assert!(stream_ran, "make_way waited until the calls stopped");

        // Calls that are not wide are not waited for: with one running for 20 s at most, the
        // waiter returns at once (nothing wide has begun since its last look).
        drop(_wide);
        let (done, started) = (AtomicBool::new(false), AtomicBool::new(false));
        let returned_during_call = std::thread::scope(|sc| {
            let waiter = sc.spawn(|| {
                while !started.load(SeqCst) {
                    std::thread::yield_now();
                }
                let mut seen = FULL_BEGUN.load(SeqCst);
                make_way(&mut seen, Duration::from_secs(60));
                let during = !done.load(SeqCst);
                done.store(true, SeqCst);
                during
            });
            team.run(cores(), &|_| {
                started.store(true, SeqCst);
                let t = Instant::now();
                while !done.load(SeqCst) && t.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            done.store(true, SeqCst);
            waiter.join().unwrap()
        });
        assert!(returned_during_call, "make_way waited for a call that is not wide");
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
