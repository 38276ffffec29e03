//! `ggml_time_init`, `ggml_time_ms`, `ggml_time_us` (ggml.h): ggml.c's POSIX clock, the
//! monotonic clock read in full (seconds since an unspecified start, never going back), so
//! values from two libraries or processes on one machine compare.

// time_t and long are 32 bits on some targets: the casts are not always to the same type.
#![allow(clippy::unnecessary_cast)]

fn monotonic() -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // CLOCK_MONOTONIC cannot fail with a valid pointer (POSIX: EINVAL only for an unknown clock).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}

/// Nothing to set up: the POSIX clock needs no start (ggml.c's POSIX version is empty too).
#[no_mangle]
pub extern "C" fn ggml_time_init() {}

#[no_mangle]
pub extern "C" fn ggml_time_ms() -> i64 {
    let ts = monotonic();
    ts.tv_sec as i64 * 1000 + ts.tv_nsec as i64 / 1_000_000
}

#[no_mangle]
pub extern "C" fn ggml_time_us() -> i64 {
    let ts = monotonic();
    ts.tv_sec as i64 * 1_000_000 + ts.tv_nsec as i64 / 1000
}
