//! `packlm`: a thin command line over the library.
//!
//!   packlm info PACK --json
//!   packlm tokenize PACK --text STR [--no-special]
//!   packlm logits PACK --tokens 1,2,3 [--all] --out FILE
//!   packlm generate PACK --prompt STR [--chat] [-n N] [--temp T] [--seed S] [--json]
//!                   [--draft ngram|DRAFT_PACK] [--draft-k K]
//!
//! Common options: --threads N, --backend host|reference. Errors print the status and message
//! and exit non-zero.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::BackendKind;
use packlm::engine::draft::{Drafter, ModelDrafter, NgramDrafter};
use packlm::engine::speculative::generate;
use packlm::engine::{info_json, Model, OpenOptions, Session, Want};
use packlm::pack::chat::Message;
use packlm::sample::SamplerParams;
use packlm::{Error, Result};

struct Args {
    rest: Vec<String>,
}

impl Args {
    fn flag(&mut self, name: &str) -> bool {
        match self.rest.iter().position(|a| a == name) {
            Some(i) => {
                self.rest.remove(i);
                true
            }
            None => false,
        }
    }
    fn value(&mut self, names: &[&str]) -> Result<Option<String>> {
        for name in names {
            if let Some(i) = self.rest.iter().position(|a| a == name) {
                if i + 1 >= self.rest.len() {
                    return Err(Error::invalid(format!("{name} needs a value")));
                }
                let v = self.rest.remove(i + 1);
                self.rest.remove(i);
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
    fn parsed<T: std::str::FromStr>(&mut self, names: &[&str], default: T) -> Result<T> {
        match self.value(names)? {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| Error::invalid(format!("{}: cannot parse {v:?}", names[0]))),
        }
    }
    fn done(&self) -> Result<()> {
        match self.rest.first() {
            Some(a) => Err(Error::invalid(format!("unexpected argument {a:?}"))),
            None => Ok(()),
        }
    }
}

const USAGE: &str = "usage:
  packlm info PACK --json
  packlm tokenize PACK --text STR [--no-special]
  packlm logits PACK --tokens 1,2,3 [--all] --out FILE
  packlm generate PACK --prompt STR [--chat] [-n N] [--temp T] [--seed S] [--json]
                  [--draft ngram|DRAFT_PACK] [--draft-k K]
options: --threads N  --backend host|reference";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.len() < 2 {
        eprintln!("{USAGE}");
        std::process::exit(2);
    }
    let (cmd, pack) = (argv[0].clone(), argv[1].clone());
    let mut args = Args { rest: argv[2..].to_vec() };
    if let Err(e) = run(&cmd, &pack, &mut args) {
        eprintln!("packlm {cmd}: error {} ({}): {}", e.status as i32, e.status.text().trim_end_matches('\0'), e.message);
        std::process::exit(1);
    }
}

fn open(pack: &str, args: &mut Args) -> Result<Arc<Model>> {
    let threads = args.parsed(&["--threads"], 0usize)?;
    let backend = match args.value(&["--backend"])?.as_deref() {
        None | Some("host") => BackendKind::Host,
        Some("reference") => BackendKind::Reference,
        Some(other) => return Err(Error::invalid(format!("--backend {other}: host or reference"))),
    };
    Ok(Arc::new(Model::open(Path::new(pack), &OpenOptions { backend, threads })?))
}

fn run(cmd: &str, pack: &str, args: &mut Args) -> Result<()> {
    match cmd {
        "info" => {
            let _ = args.flag("--json");
            let m = open(pack, args)?;
            args.done()?;
            println!("{}", serde_json::to_string_pretty(&info_json(&m)).unwrap_or_default());
            Ok(())
        }
        "tokenize" => {
            let text = args.value(&["--text"])?.ok_or_else(|| Error::invalid("--text is required"))?;
            let special = !args.flag("--no-special");
            let m = open(pack, args)?;
            args.done()?;
            let ids = m.vocab().encode(&text, special, special)?;
            println!("{}", serde_json::to_string(&ids).unwrap_or_default());
            Ok(())
        }
        "logits" => logits(pack, args),
        "generate" => cmd_generate(pack, args),
        other => Err(Error::invalid(format!("unknown command {other:?}\n{USAGE}"))),
    }
}

fn logits(pack: &str, args: &mut Args) -> Result<()> {
    let tokens = args.value(&["--tokens"])?.ok_or_else(|| Error::invalid("--tokens is required"))?;
    let out = args.value(&["--out"])?.ok_or_else(|| Error::invalid("--out is required"))?;
    let all = args.flag("--all");
    let m = open(pack, args)?;
    args.done()?;
    let ids: Vec<u32> = tokens
        .split(',')
        .map(|t| t.trim().parse().map_err(|_| Error::invalid(format!("--tokens: {t:?} is not a token id"))))
        .collect::<Result<_>>()?;
    let mut s = Session::new(m, 0)?;
    let logits = s.step_batch(&ids, if all { Want::All } else { Want::Last })?;
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&out, bytes).map_err(|e| Error::io(Path::new(&out), e))
}

fn cmd_generate(pack: &str, args: &mut Args) -> Result<()> {
    let prompt = args.value(&["--prompt"])?.ok_or_else(|| Error::invalid("--prompt is required"))?;
    let chat = args.flag("--chat");
    let json = args.flag("--json");
    let n_new: usize = args.parsed(&["-n", "--n"], 64)?;
    let temp: f32 = args.parsed(&["--temp"], 0.0)?;
    let seed: u64 = args.parsed(&["--seed"], 0)?;
    let draft = args.value(&["--draft"])?;
    let draft_k: usize = args.parsed(&["--draft-k"], 8)?;
    let m = open(pack, args)?;
    args.done()?;
    let prompt_ids = if chat {
        let text = m.render_chat(&[Message { role: "user".into(), content: prompt.clone() }], true)?;
        m.vocab().encode(&text, true, true)?
    } else {
        m.vocab().encode(&prompt, true, false)?
    };
    if prompt_ids.is_empty() {
        return Err(Error::invalid("the prompt has no tokens"));
    }
    let mut drafter: Option<Box<dyn Drafter>> = match draft.as_deref() {
        None => None,
        Some("ngram") => Some(Box::new(NgramDrafter::default())),
        Some(path) => {
            let dm = Arc::new(Model::open(Path::new(path), &OpenOptions { backend: BackendKind::Host, threads: 0 })?);
            Some(Box::new(ModelDrafter::new(dm, &m)?))
        }
    };
    let params = SamplerParams { temperature: temp, ..Default::default() };
    let mut rng = seed;
    let mut s = Session::new(m.clone(), 0)?;
    // Prefill timed alone, then the generation loop (whose first pass is the prompt's last row).
    let t0 = Instant::now();
    let (head, last) = prompt_ids.split_at(prompt_ids.len() - 1);
    if !head.is_empty() {
        s.step_batch(head, Want::None)?;
    }
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let g = generate(&mut s, last, n_new, &params, &mut rng, drafter.as_deref_mut(), draft_k)?;
    let decode_s = t1.elapsed().as_secs_f64();
    let text = m.vocab().decode(&g.tokens, true)?;
    if json {
        let mut v = serde_json::json!({
            "tokens": g.tokens,
            "text": text,
            "prompt_tokens": prompt_ids.len(),
            "prefill_tok_s": head.len() as f64 / prefill_s.max(1e-9),
            "decode_tok_s": g.tokens.len() as f64 / decode_s.max(1e-9),
        });
        if draft.is_some() {
            v["drafted"] = g.drafted.into();
            v["accepted"] = g.accepted.into();
            v["rounds"] = g.rounds.into();
        }
        println!("{v}");
    } else {
        println!("{text}");
    }
    Ok(())
}
