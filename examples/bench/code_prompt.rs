//! The prompt of a code-editing request, shared by examples/bench.rs (`spec_speedup_code`) and
//! examples/draft_replay.rs.

use packlm::engine::Model;
use packlm::error::Result;
use packlm::pack::chat::Message;

/// `request` through the pack's chat template; a pack without one (a base model) gets the
/// request followed by the start of the answer, so that it continues with the code rather than
/// ending the document.
pub fn code_prompt(m: &Model, request: &str) -> Result<Vec<u32>> {
    match m.render_chat(&[Message { role: "user".into(), content: request.into() }], true) {
        Ok(text) => m.vocab().encode(&text, true, true),
        Err(_) => m.vocab().encode(&format!("{request}\nAnswer:\n```python\n"), true, false),
    }
}
