//! A chat reply streamed through the safe Rust API, the whole program:
//!
//!     cargo run --release --example chat -- models/SmolLM2-135M-Instruct.Q4_1.gguf "What is the capital of France?"
//!
//! It uses only items of the crate root (`packlm::Model`, `packlm::Session`, ...), as a program
//! that depends on the crate would.

use std::io::Write;

use packlm::{ChatMessage, GenerateOptions, Model, NgramDrafter};

fn main() -> packlm::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(question)) = (args.next(), args.next()) else {
        eprintln!("usage: chat PACK QUESTION [MAX_TOKENS]");
        std::process::exit(2);
    };
    let max_tokens = args.next().and_then(|n| n.parse().ok()).unwrap_or(64);

    let model = Model::open(&path)?;
    // The pack's own chat template, then its tokens (special-token text parsed, BOS by the
    // pack's rule).
    let text = match model.chat_template() {
        Some(_) => model.chat_apply(&[ChatMessage { role: "user".into(), content: question }], true)?,
        None => question,
    };
    let prompt = model.tokenize(&text, true, true)?;

    let mut session = model.session()?;
    // Greedy, with an n-gram drafter: each round verifies its drafts in one pass, and the reply
    // is token for token what plain greedy stepping gives.
    let mut drafter = NgramDrafter::default();
    let options = GenerateOptions { max_tokens, drafter: Some(&mut drafter), ..Default::default() };
    let mut reply = session.generate(&prompt, options);
    let mut out = std::io::stdout().lock();
    for token in &mut reply {
        let _ = out.write_all(token?.text.as_bytes());
        let _ = out.flush();
    }
    let _ = writeln!(out, "{}", reply.rest()?);
    Ok(())
}
