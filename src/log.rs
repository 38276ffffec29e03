//! Library log messages: to the host's callback when one is set (packlm_set_log_callback),
//! else to stderr when PACKLM_LOG asks for that level ("debug" shows everything, "info" less).

use std::sync::Arc;

use parking_lot::RwLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
}

/// A host callback: the level number, the NUL-terminated message, and the host's user_data.
pub type Sink = Arc<dyn Fn(Level, &str) + Send + Sync>;

/// The lock guards only the pointer: the sink is cloned out and called after the lock is
/// released, because a host callback may call back in (set a new callback, open a model).
static SINK: RwLock<Option<Sink>> = RwLock::new(None);

pub fn set_sink(sink: Option<Sink>) {
    let old = std::mem::replace(&mut *SINK.write(), sink);
    // The old sink (and its captured state) is dropped here, outside the lock.
    drop(old);
}

fn current_sink() -> Option<Sink> {
    SINK.read().clone()
}

fn env_level() -> Option<Level> {
    match std::env::var("PACKLM_LOG").ok()?.as_str() {
        "debug" => Some(Level::Debug),
        "info" => Some(Level::Info),
        "warn" => Some(Level::Warn),
        _ => None,
    }
}

/// Whether a message at `level` would go anywhere (to skip building it otherwise).
pub fn enabled(level: Level) -> bool {
    SINK.read().is_some() || env_level().map(|l| level >= l).unwrap_or(false)
}

pub fn log(level: Level, message: &str) {
    if let Some(sink) = current_sink() {
        sink(level, message);
        return;
    }
    if env_level().map(|l| level >= l).unwrap_or(false) {
        eprintln!("packlm: {message}");
    }
}
