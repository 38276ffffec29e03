//! The writing of the interleaved copies after the open (`Interleaver`): a thread of the
//! backend's at the scheduler's idle priority, and the pool's helpers between calls
//! (`Shared::help`), taking the queued matrices one after another (`Packed::interleave`,
//! `Packed::write_groups`).

use super::*;
use crate::backend::host::team;

/// Writes the interleaved copies of one backend's matrices (`Packed::interleave`), one after
/// another in the order they were prepared: from `start` (the end of the open: while the open
/// runs, a second thread faulting in fresh pages slowed it by half) on a thread of its own that
/// lives while there are matrices waiting, or, without `background`, when `finish` is called.
/// On its own thread it takes each piece when no prefill runs on every core, or after a bounded
/// wait (team::make_way). Dropped, it stops that thread at its next piece and waits for it, so
/// that no thread of the library outlives the model that started it.
pub struct Interleaver {
    shared: std::sync::Arc<Shared>,
    background: bool,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct Shared {
    /// Where the side tables and copies are cut from.
    arena: Arena,
    /// Matrices still to interleave, and whether a thread is taking them.
    queue: parking_lot::Mutex<(std::collections::VecDeque<std::sync::Weak<Packed>>, bool)>,
    /// The matrix whose copy is being written, taken from the queue by the writer thread or a
    /// helper (`current`). Locked before `queue` where both are.
    current: parking_lot::Mutex<Option<std::sync::Weak<Packed>>>,
    stop: std::sync::atomic::AtomicBool,
    /// Set by a test: the writer thread, once it has built the side tables, waits until this is
    /// cleared or it is stopped, so that only the pool's helpers write the copies meanwhile.
    #[cfg(test)]
    hold_writer: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            arena: Arena::new(),
            queue: parking_lot::Mutex::new(Default::default()),
            current: parking_lot::Mutex::new(None),
            stop: Default::default(),
            #[cfg(test)]
            hold_writer: Default::default(),
        }
    }

    /// Builds the side tables of what the queue holds (all of them first: the group kernels
    /// need them, the copies only speed them up), then interleaves it until it is empty (then,
    /// on the queue's thread, says that no thread takes it any more) or `stop` is set.
    fn drain(&self, on_thread: bool) {
        // On its own thread the writer gives way to prefills that use every core; called by a
        // thread that wants the copies now (`finish`), it does not.
        let mut seen = 0;
        let mut before_piece = || {
            if on_thread {
                team::make_way(&mut seen, team::MAX_WAIT)
            }
        };
        let queued: Vec<std::sync::Arc<Packed>> = self.queue.lock().0.iter().filter_map(std::sync::Weak::upgrade).collect();
        for p in queued {
            if self.stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            before_piece();
            p.side_table(&self.arena, &|n, task| (0..n).for_each(task), true);
        }
        // The side tables at normal priority, the copies at the idle one: a pass finding a
        // table being built takes the row-order kernels rather than wait, and helpers write
        // only copies whose table is there, so a writer that built them at the idle priority
        // and lost its core kept every pass on the row-order kernels for those matrices
        // (Gemma3-270m Q4_0's 262k-row output matrix, decoding on two threads: its copy was
        // done after 360-390 steps).
        if on_thread {
            background_priority();
        }
        #[cfg(test)]
        while self.hold_writer.load(std::sync::atomic::Ordering::SeqCst) && !self.stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        loop {
            let stopped = self.stop.load(std::sync::atomic::Ordering::Relaxed);
            match if stopped { None } else { self.current(true, true) } {
                Some(p) => p.interleave(&self.arena, &self.stop, &mut before_piece),
                None => {
                    let mut q = self.queue.lock();
                    // A matrix queued after the look above is taken on the next round.
                    if !q.0.is_empty() && !stopped {
                        continue;
                    }
                    if on_thread {
                        q.1 = false;
                    }
                    return;
                }
            }
        }
    }

    /// The matrix whose copy is being written, else the next queued one whose copy can be begun
    /// (`Packed::begin_copy`), made current; None when there is none. The writer (`writer`)
    /// drops a queued matrix whose copy cannot be begun (it built every side table first, so
    /// the memory could not be had); a helper leaves it for the writer and takes none. Without
    /// `wait`, None also where another thread is looking.
    fn current(&self, writer: bool, wait: bool) -> Option<std::sync::Arc<Packed>> {
        let mut cur = if wait { self.current.lock() } else { self.current.try_lock()? };
        if let Some(p) = cur.as_ref().and_then(std::sync::Weak::upgrade) {
            if !p.is_interleaved() {
                return Some(p);
            }
        }
        *cur = None;
        let mut q = if wait { self.queue.lock() } else { self.queue.try_lock()? };
        while let Some(front) = q.0.front() {
            let Some(p) = front.upgrade() else {
                q.0.pop_front();
                continue;
            };
            if !p.begin_copy(&self.arena) {
                if writer {
                    q.0.pop_front();
                    continue;
                }
                return None;
            }
            q.0.pop_front();
            *cur = Some(std::sync::Arc::downgrade(&p));
            return Some(p);
        }
        None
    }

    /// A pool helper's piece of the copies' writing between calls (team::add_idle_work): about
    /// HELP_BYTES of the current matrix, never waiting for a lock. Passes on every core leave
    /// the writer thread, at the idle priority, no core: decoding without pause on two threads
    /// right after the open, SmolLM2-135M Q8_0's copies were not written after 400 steps, which
    /// ran on the stored order meanwhile. Some(whether it wrote), or None once every queued
    /// matrix is written (or the writer was stopped): the helper then drops this work.
    fn help(&self) -> Option<bool> {
        if self.stop.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let Some(p) = self.current(false, false) else {
            // Nothing current: none left at all, or the next one's side table is not built yet
            // (or another thread is looking).
            let idle = self.current.try_lock().is_some_and(|c| c.is_none()) && self.queue.try_lock().is_some_and(|q| q.0.is_empty());
            return if idle { None } else { Some(false) };
        };
        let groups = (HELP_BYTES / (p.lanes * p.row_bytes)).max(1);
        Some(p.write_groups(groups, false))
    }
}

impl Interleaver {
    pub fn new(background: bool) -> Interleaver {
        Interleaver { shared: std::sync::Arc::new(Shared::new()), background, thread: parking_lot::Mutex::new(None) }
    }

    pub fn arena(&self) -> &Arena {
        &self.shared.arena
    }

    /// Queues `p` for the next `start` or `finish`.
    pub fn submit(&self, p: &std::sync::Arc<Packed>) {
        self.shared.queue.lock().0.push_back(std::sync::Arc::downgrade(p));
    }

    /// With `background`, starts the thread if matrices are queued and none is taking them. A
    /// thread that cannot be had leaves the stored order in use.
    pub fn start(&self) {
        let mut q = self.shared.queue.lock();
        if !self.background || q.1 || q.0.is_empty() {
            return;
        }
        let shared = self.shared.clone();
        let Ok(handle) = std::thread::Builder::new().name("packlm-interleave".into()).spawn(move || shared.drain(true)) else { return };
        q.1 = true;
        drop(q);
        // Pool helpers write pieces between calls too (`Shared::help`).
        let weak = std::sync::Arc::downgrade(&self.shared);
        let help: std::sync::Arc<dyn Fn() -> Option<bool> + Send + Sync> = std::sync::Arc::new(move || weak.upgrade()?.help());
        team::add_idle_work(help);
        // The previous thread said it was done before this one was started: it has returned,
        // or is returning.
        if let Some(done) = self.thread.lock().replace(handle) {
            let _ = done.join();
        }
    }

    /// Interleaves every matrix still queued, on the calling thread.
    pub fn finish(&self) {
        self.shared.drain(false);
    }
}

/// Puts the calling thread (the writer) at the scheduler's idle priority, where the platform has
/// one: it then runs only on a core that no thread of normal priority wants. Passes split their
/// work over threads that wait for each other, so a writer that takes a core from one of them
/// holds up the whole pass while the others spin. On a 2-core AVX2 VM, Gemma3-270m Q4_0 at two
/// threads, open, four 128-token prefills, then 64 decode steps as `examples/bench.rs` times
/// them (six rounds each, alternating): at normal priority decode ran at 36-68 tok/s, and the
/// copies were done 2.4-3.9 s after the open (1.0 s in the one fast round); at idle priority
/// 49-69 tok/s (five rounds 56-69), done after 1.2-2.0 s (5.6 s in the slow round): the writer
/// uses the moments the passes leave (a helper between calls, the host's own work) instead of
/// taking cores from them. Linux and Android: SCHED_IDLE. Elsewhere the writer keeps normal
/// priority, as it does where the call is refused (a sandbox): slower passes, the same bits.
fn background_priority() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the calling
        // thread on Linux, so no other thread is touched.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}

impl Drop for Interleaver {
    fn drop(&mut self) {
        self.shared.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    /// The writer's priority call puts its own thread, and no other, at SCHED_IDLE.
    #[test]
    fn background_priority_is_the_idle_policy_of_the_calling_thread_only() {
        // SAFETY: sched_getscheduler only reads the policy of the calling thread (pid 0).
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let before = policy();
        let inside = std::thread::spawn(move || {
            super::background_priority();
            policy()
        })
        .join()
        .unwrap();
        assert_eq!(inside, libc::SCHED_IDLE);
        assert_eq!(policy(), before, "the calling thread's policy changed");
        assert_ne!(before, libc::SCHED_IDLE);
    }
}

#[cfg(test)]
mod help_tests {
    use super::super::*;
    use super::*;
    use crate::pack::tensor::TensorBytes;

    /// A matrix of `rows` rows of 64 elements in format `ty`, random bytes with small scales.
    fn matrix(ty: WeightType, rows: usize, seed: u64) -> WeightTensor {
        let rb = ty.row_bytes(64).expect("a block format");
        let mut state = seed;
        let mut bytes: Vec<u8> = (0..rows * rb).map(|_| crate::sample::next_u64(&mut state) as u8).collect();
        for b in bytes.chunks_exact_mut(ty.block_bytes()) {
            b[1] = 0x20 | (b[1] & 0x07);
        }
        WeightTensor::new(String::new(), ty, vec![rows, 64], TensorBytes::Owned(std::sync::Arc::new(bytes))).expect("whole rows")
    }

    /// Packed matrices of the given formats and row counts, matrix i from seed `seed + i`.
    fn packed(specs: &[(WeightType, usize)], seed: u64) -> Vec<std::sync::Arc<Packed>> {
        let each = |(i, &(ty, rows)): (usize, &(WeightType, usize))| Packed::new(&matrix(ty, rows, seed + i as u64), GROUP).expect("a block-sum format");
        specs.iter().enumerate().map(|s| std::sync::Arc::new(each(s))).collect()
    }

    /// Every row of `p`, rebuilt from its interleaved copy, is the stored row.
    fn assert_rows_rebuild_from_the_copy(p: &Packed) {
        let (bytes, rb) = (p.tensor.bytes(), p.row_bytes);
        let mut row = Vec::new();
        for j in 0..p.rows() {
            assert!(p.stored_row(j, &mut row), "{:?} row {j}: not in the copy", p.ty);
            assert_eq!(&row[..], &bytes[j * rb..(j + 1) * rb], "{:?} row {j}: rebuilt from the copy", p.ty);
        }
    }

    /// What pool helpers do between calls (`Shared::help`) writes whole copies by itself, a
    /// few groups a call, one matrix after another: each matrix ends up interleaved, and every
    /// row rebuilt from its copy is the stored row. Then the work says it has none left.
    #[test]
    fn helpers_alone_write_every_copy() {
        let shared = Shared::new();
        // 300 groups of 16 rows of 2 blocks: Q8_0 rows of 68 bytes, so HELP_BYTES takes 15 groups a call.
        let mats = packed(&[(WeightType::Q8_0, 300 * GROUP), (WeightType::Q4_1, 7 * GROUP + 3), (WeightType::Q5_0, 40 * GROUP)], 17);
        for p in &mats {
            shared.queue.lock().0.push_back(std::sync::Arc::downgrade(p));
        }
        // Without side tables a helper writes nothing (and keeps the work): the writer or a
        // pass builds them.
        assert_eq!(shared.help(), Some(false));
        assert!(mats.iter().all(|p| !p.is_interleaved()));
        for p in &mats {
            assert!(p.side_table(&shared.arena, &|n, task| (0..n).for_each(task), true));
        }
        let mut calls = 0;
        while let Some(wrote) = shared.help() {
            assert!(wrote, "call {calls} wrote nothing with copies left");
            calls += 1;
            assert!(calls < 10_000, "the copies never finish");
        }
        assert!(calls >= 300 / 15, "{calls} calls for 347 groups");
        for p in &mats {
            assert!(p.is_interleaved(), "{:?}: not interleaved", p.ty);
            assert_rows_rebuild_from_the_copy(p);
        }
    }

    /// A started interleaver hands its copies to the pool's helpers too (`Interleaver::start`
    /// registers `Shared::help` as idle work): with the writer thread held after the side
    /// tables, the copies are still all written, by helpers between calls, and rebuild as
    /// stored. Without that registration nothing writes them here.
    #[test]
    fn a_started_interleaver_has_the_helpers_write_its_copies() {
        let il = Interleaver::new(true);
        il.shared.hold_writer.store(true, std::sync::atomic::Ordering::SeqCst);
        let mats = packed(&[(WeightType::Q8_0, 120 * GROUP), (WeightType::Q4_0, 90 * GROUP + 5)], 40);
        for p in &mats {
            il.submit(p);
        }
        il.start();
        let team = team::Team::new(2).expect("a team");
        let t = std::time::Instant::now();
        while !mats.iter().all(|p| p.is_interleaved()) {
            assert!(t.elapsed() < std::time::Duration::from_secs(60), "copies not written by the helpers in 60 s");
            // Helpers that slept since their last call are woken by the next one.
            team.run(2, &|_| {});
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        assert!(il.shared.hold_writer.load(std::sync::atomic::Ordering::SeqCst), "the writer was held throughout");
        for p in &mats {
            assert_rows_rebuild_from_the_copy(p);
        }
    }

    /// The writer thread's path and helpers' calls share one copy: a copy half written by
    /// helpers is finished by `interleave`, and rows from both parts rebuild as stored.
    #[test]
    fn the_writer_finishes_what_helpers_began() {
        let shared = Shared::new();
        let p = std::sync::Arc::new(Packed::new(&matrix(WeightType::Q4_0, 200 * GROUP, 5), GROUP).expect("a block-sum format"));
        assert!(p.side_table(&shared.arena, &|n, task| (0..n).for_each(task), true));
        shared.queue.lock().0.push_back(std::sync::Arc::downgrade(&p));
        for _ in 0..3 {
            assert_eq!(shared.help(), Some(true));
        }
        let ready = p.ready.load(std::sync::atomic::Ordering::Acquire);
        assert!(ready > 0 && ready < p.groups, "{ready} of {} groups after three helper calls", p.groups);
        p.interleave(&shared.arena, &std::sync::atomic::AtomicBool::new(false), &mut || ());
        assert!(p.is_interleaved());
        let (bytes, rb) = (p.tensor.bytes(), p.row_bytes);
        let mut row = Vec::new();
        for j in [0, ready * GROUP - 1, ready * GROUP, p.rows() - 1] {
            assert!(p.stored_row(j, &mut row));
            assert_eq!(&row[..], &bytes[j * rb..(j + 1) * rb], "row {j}");
        }
        assert_eq!(shared.help(), None, "nothing left to write");
    }
}
