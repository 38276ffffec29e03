//! A chat template of arbitrary text rendered over a small chat: the input up to the first NUL
//! is the template, the rest (split at NULs) are the messages' contents. The seeds include the
//! hostile corpus of tests/chat_memory.rs (filters, operators and constants that build one huge
//! value, values that double or nest in a loop), so that mutations explore around them; the
//! fuzz smoke runs this target with a small allocation limit, so a step that allocates past the
//! render's budget is a finding even when it would not exhaust the machine.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packlm::pack::chat::{render, Limits, Message};
use packlm::Status;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or("");
    let roles = ["system", "user", "assistant"];
    let messages: Vec<Message> = parts
        .take(8)
        .enumerate()
        .map(|(i, c)| Message { role: roles[i % 3].to_string(), content: c.to_string() })
        .collect();
    let limits = Limits::for_chat(&messages);
    match render(template, &messages, true, "<s>", "</s>") {
        Ok(out) => assert!(out.len() <= limits.output_cap, "{} bytes rendered past the cap of {}", out.len(), limits.output_cap),
        Err(e) => assert!(
            matches!(e.status, Status::ErrLimitExceeded | Status::ErrUnsupported | Status::ErrTokenizer | Status::ErrUtf8),
            "unexpected status {:?}: {}",
            e.status,
            e.message
        ),
    }
});
