//! The cancellation context of one forward pass, for backends whose kernels are long.
//!
//! A session's abort flag (set from any thread) is checked by the engine between layers, but
//! one kernel call can be long too: a prefill's matmul over thousands of rows, or the output
//! projection over a 262k vocabulary. While a pass runs, its flag is this thread's current
//! pass flag ([`enter`]); a backend that splits a kernel into tasks reads it once per call
//! ([`current`]) and checks it with one relaxed load per task, skipping the remaining tasks
//! once it is set and recording that with [`note_cut_short`]. The engine then refuses the pass
//! ([`cut_short`]), also when the host cleared the flag in the meantime: a kernel that skipped
//! work never yields a result. A backend that ignores the context stays correct; it only stops
//! later (at the next layer).
//!
//! The context is per thread, not an op argument, so the op set stays the same for every
//! backend; the calling thread hands the flag to its helper threads itself.

use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

thread_local! {
    static FLAG: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
    static CUT_SHORT: Cell<bool> = const { Cell::new(false) };
}

/// While alive, `flag` is this thread's current pass flag; dropping it (also while unwinding)
/// restores the previous context.
pub struct PassScope {
    previous: Option<Arc<AtomicBool>>,
    previous_cut: bool,
}

/// Makes `flag` the current pass flag of this thread, with nothing cut short yet.
pub fn enter(flag: &Arc<AtomicBool>) -> PassScope {
    let previous = FLAG.with(|f| f.replace(Some(flag.clone())));
    let previous_cut = CUT_SHORT.with(|c| c.replace(false));
    PassScope { previous, previous_cut }
}

impl Drop for PassScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        // `try_with`: nothing to restore once the thread's storage is being torn down.
        let _ = FLAG.try_with(|f| f.replace(previous));
        let _ = CUT_SHORT.try_with(|c| c.set(self.previous_cut));
    }
}

/// While alive, this thread runs outside any pass: work that must not stop half done (a
/// table built once and kept, `packed::Packed::side_table`) runs every task even if the pass
/// that asked for it is aborted meanwhile. Dropping it restores the pass's context.
pub fn outside() -> PassScope {
    let previous = FLAG.with(|f| f.replace(None));
    let previous_cut = CUT_SHORT.with(|c| c.replace(false));
    PassScope { previous, previous_cut }
}

/// The current pass's abort flag on this thread, if a pass is running.
pub fn current() -> Option<Arc<AtomicBool>> {
    FLAG.try_with(|f| f.borrow().clone()).ok().flatten()
}

/// Records that a kernel of the current pass skipped work because the flag was set.
pub fn note_cut_short() {
    let _ = CUT_SHORT.try_with(|c| c.set(true));
}

/// Whether a kernel of the current pass skipped work.
pub fn cut_short() -> bool {
    CUT_SHORT.try_with(|c| c.get()).unwrap_or(false)
}
