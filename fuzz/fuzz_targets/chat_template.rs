//! A chat template of arbitrary text rendered over a small chat: the input up to the first NUL
//! is the template, the rest (split at NULs) are the messages' contents.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packlm::pack::chat::{render, Message};

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
    let _ = render(template, &messages, true, "<s>", "</s>");
});
