//! Chat templates run with fuel and an output cap: a template that would loop or print far
//! past any real chat returns ErrLimitExceeded, while real templates over long chats render.
//! (The unbounded versions of these templates are in the hostile corpus, run in a child.)

mod common;

use packlm::pack::chat::{render, Message};
use packlm::Status;

fn chat(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| Message { role: if i % 2 == 0 { "user" } else { "assistant" }.into(), content: format!("message {i}") })
        .collect()
}

#[test]
fn a_long_loop_runs_out_of_fuel() {
    // 10^8 iterations: finite, but far past 10^7 + 10^5 per message.
    let t = "{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}done";
    let e = render(t, &chat(1), true, "<s>", "</s>").unwrap_err();
    assert_eq!(e.status, Status::ErrLimitExceeded, "{e}");
    assert!(e.message.contains("fuel"), "{e}");
}

#[test]
fn output_past_the_cap_is_refused() {
    // 3 MiB of output for a chat of 9 bytes: past 1 MiB + 4 x 9.
    let t = "{% for a in range(3) %}{{ 'x' * 1048576 }}{% endfor %}";
    let e = render(t, &chat(1), true, "<s>", "</s>").unwrap_err();
    assert_eq!(e.status, Status::ErrLimitExceeded, "{e}");
    assert!(e.message.contains("output"), "{e}");
    // Just under the cap is fine.
    let ok = render("{{ 'x' * 1048000 }}", &chat(1), true, "<s>", "</s>").unwrap();
    assert_eq!(ok.len(), 1048000);
}

/// SmolLM2's template (the GGUF's tokenizer.chat_template) over 2000 messages: the fuel grows
/// with the chat, so long real chats still render. Expected text per ChatML: one
/// "<|im_start|>{role}\n{content}<|im_end|>\n" per message.
#[test]
fn real_templates_render_long_chats() {
    let Some(path) = common::smollm2() else { return };
    let m = common::open_with(&path, packlm::backend::BackendKind::Reference, 1);
    let msgs = chat(2000);
    let text = m.render_chat(&msgs, false).unwrap();
    assert!(text.contains("<|im_start|>assistant\nmessage 1999<|im_end|>\n"), "{}", &text[text.len().saturating_sub(200)..]);
    assert_eq!(text.matches("<|im_start|>").count(), 2000 + usize::from(!text.starts_with("<|im_start|>user")));
}
