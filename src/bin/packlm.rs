//! `packlm`: a thin command line over the library.
//!
//!   packlm info PACK --json
//!   packlm tokenize PACK --text STR [--no-special]
//!   packlm logits PACK --tokens 1,2,3 [--all] --out FILE
//!   packlm export-onnx PACK DIR [--tokens 1,2,3] [--ep NAME] [--ep-options "K=V;.."] [--onnxruntime LIB]
//!                   [--compile-ahead N]
//!   packlm generate PACK --prompt STR [--chat | --no-special] [-n N] [--temp T] [--seed S] [--json]
//!                   [--draft ngram|DRAFT_PACK] [--draft-k K] [--json-schema FILE | --grammar FILE | --regex RE]
//!   packlm generate PACK --parallel N --prompt STR [--prompt STR ..] [--samples K] [--chat | --no-special]
//!                   [-n N] [--temp T] [--seed S] [--json]
//!   packlm embed PACK --text STR [--text STR ..] [--pooling none|mean|cls|last] [--normalize | --no-normalize]
//!
//! `embed` prints one JSON object: `{"model": PACK, "pooling": "mean", "normalized": true, "dim":
//! N, "embeddings": [...], "tokens": [[ids of text 0], ...]}`. `embeddings[i]` belongs to text i
//! in every mode: one vector of `dim` values when pooled (mean, cls, last), or, with `--pooling
//! none`, a list of vectors, one per token of `tokens[i]` in order. Each text is tokenized with
//! the pack's special tokens added (BOS/EOS as its tokenizer adds them) and special-token text
//! left as plain text; the pooling and normalization default to what the pack declares
//! (sentence-transformers' modules.json, a GGUF's pooling type). All texts run in one pass.
//!
//! `--lora PATH[:SCALE]` (repeatable; `generate`, `generate --parallel`, `logits`, `embed`):
//! a LoRA adapter (a PEFT folder or an adapter GGUF) applied to the session's passes with that
//! scale (default 1.0), in the order given; the model's weights are left as they are.
//! `--control-vector PATH[:SCALE]` (repeatable; the same commands): a llama.cpp control-vector
//! GGUF, the files' directions summed times their scales (default 1.0) and added at the end of
//! each layer of `--control-vector-layers START-END` (0-based, inclusive; by default 1 to the
//! last layer, llama.cpp's range: its files hold no direction for layer 0).
//!
//! `--parallel N` answers every `--prompt` (given once per prompt), N at a time: their sessions
//! step together, one pass over the weights for all of them (`Session::step_many`), and each
//! reply is the one `generate` gives that prompt alone (the same tokens for the same --seed). It
//! prints each reply once all are done, as `[i] text` lines, or one JSON line per reply.
//! `--samples K` answers each prompt K times, with seeds S, S+1, .., S+K-1: the prompt is
//! prefilled once and the other K-1 sessions are forks of it (`Session::fork`: its KV shared,
//! not copied), each reply the one `generate --seed S+j` gives alone.
//!
//! Special-token text in a prompt ("<|im_start|>", "<start_of_turn>") is parsed into its token by
//! `generate` as by `tokenize` (as HF's tokenizer and llama.cpp's CLI do), so a hand-rendered chat
//! prompt gives the tokens the template would; `--no-special` treats it as plain text. BOS is
//! added by the pack's rule (never twice) either way.
//!
//! Common options: --threads N, --backend host|reference|gpu|npu (npu: --ep NAME, --ep-options
//! "K=V;..", --onnxruntime LIB, --compile-ahead N), --precision exact|fast (default: the
//! pack's, fast for block-quantized weights, exact for float ones; `info` prints the precision in
//! use, exact on a backend without reduced-precision kernels). Errors print the status and
//! message and exit non-zero; so do arguments that are not UTF-8 and a closed stdout (a broken pipe).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use packlm::{Adapter, Backend, ChatMessage, Constraint, ControlVector, Drafter, EmbedOptions, GrammarKind, Error, GenerateOptions, Model, ModelDrafter, NgramDrafter, OpenOptions, Pooling, Precision, Result, SamplerParams, Session, StepItem, Want};

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
  packlm export-onnx PACK DIR [--tokens 1,2,3] [--ep NAME] [--ep-options \"K=V;..\"] [--onnxruntime LIB]
                  [--compile-ahead N]
      runs a prefill of the tokens and one decode step on the npu backend and writes each graph it
      compiles to DIR as ONNX (graphN_rowsM_kvK.onnx, the weights in weights.bin beside them, what
      each input and output is in graphs.json), with the logits computed (logits.f32, export.json);
      with --compile-ahead N, also every graph that sessions of up to N positions use
  packlm generate PACK --prompt STR [--chat | --no-special] [-n N] [--temp T] [--seed S] [--json]
                  [--draft ngram|DRAFT_PACK] [--draft-k K]
  packlm generate PACK --parallel N --prompt STR [--prompt STR ..] [--samples K] [--chat | --no-special] [-n N]
                  [--temp T] [--seed S] [--json]
  packlm embed PACK --text STR [--text STR ..] [--pooling none|mean|cls|last] [--normalize | --no-normalize]
      prints {\"model\", \"pooling\", \"normalized\", \"dim\", \"embeddings\", \"tokens\"}: embeddings[i] is text i's
      vector (dim values), or with --pooling none its list of token vectors, one per id of tokens[i];
      pooling and normalization default to the pack's
options: --threads N  --backend host|reference|gpu|npu  --precision exact|fast
         --ep NAME (npu: ONNX Runtime's execution provider: cpu (default), openvino, vitisai, qnn, coreml,
         cuda, dml)  --ep-options \"KEY=VALUE;..\"  --onnxruntime LIB (npu: ONNX Runtime's library;
         default: $PACKLM_ONNXRUNTIME, then the system's search path)
         --compile-ahead N (npu: compile at open the graphs that sessions of up to N positions use,
         at most the model's context; default 0: each graph at its first use)
         --lora PATH[:SCALE] (generate, logits, embed; repeatable; scale 1.0 by default): a LoRA adapter,
         a PEFT folder or an adapter GGUF, applied to the session
         --control-vector PATH[:SCALE] (generate, logits, embed; repeatable): a llama.cpp control-vector
         GGUF, summed with the others, added at the end of each layer of --control-vector-layers START-END
         (0-based, inclusive; 1 to the last layer by default)";

/// Writes to stderr without panicking when stderr is closed too.
fn report(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Prints one line to stdout; a closed pipe (or any write error) becomes an error, not a panic.
fn print_line(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|_| out.flush()).map_err(|e| Error::new(packlm::Status::ErrIo, format!("writing to stdout: {e}")))
}

/// The arguments as UTF-8, or the first one that is not.
fn utf8_args() -> Result<Vec<String>> {
    std::env::args_os()
        .skip(1)
        .enumerate()
        .map(|(i, a)| a.into_string().map_err(|a| Error::invalid(format!("argument {} ({a:?}) is not valid UTF-8", i + 1))))
        .collect()
}

fn main() {
    let argv = match utf8_args() {
        Ok(a) => a,
        Err(e) => {
            report(&format!("packlm: {}", e.message));
            std::process::exit(2);
        }
    };
    if argv.iter().take(2).any(|a| a == "--help" || a == "-h") {
        let _ = print_line(USAGE);
        return;
    }
    if argv.len() < 2 {
        report(USAGE);
        std::process::exit(2);
    }
    let (cmd, pack) = (argv[0].clone(), argv[1].clone());
    let mut args = Args { rest: argv[2..].to_vec() };
    if let Err(e) = run(&cmd, &pack, &mut args) {
        report(&format!("packlm {cmd}: error {} ({}): {}", e.status as i32, e.status.text().trim_end_matches('\0'), e.message));
        std::process::exit(1);
    }
}

fn open(pack: &str, args: &mut Args) -> Result<Model> {
    let threads = args.parsed(&["--threads"], 0usize)?;
    let backend = match args.value(&["--backend"])? {
        None => Backend::Host,
        Some(v) => v.parse::<Backend>()?,
    };
    let precision = match args.value(&["--precision"])? {
        None => None,
        Some(v) => Some(v.parse::<Precision>().map_err(|e| Error::new(e.status, format!("--precision {v:?}: exact or fast")))?),
    };
    let mut opts = OpenOptions { backend, threads, precision, ..OpenOptions::default() };
    if let Some(ep) = args.value(&["--ep"])? {
        opts.provider = Some(ep);
    }
    if let Some(o) = args.value(&["--ep-options"])? {
        opts.provider_options = o;
    }
    if let Some(lib) = args.value(&["--onnxruntime"])? {
        opts.onnxruntime = Some(lib);
    }
    opts.compile_ahead = args.parsed(&["--compile-ahead"], 0usize)?;
    Model::open_with(pack, &opts)
}

fn run(cmd: &str, pack: &str, args: &mut Args) -> Result<()> {
    match cmd {
        "info" => {
            let _ = args.flag("--json");
            let m = open(pack, args)?;
            args.done()?;
            // The precision in use ("precision"): what the backend computes in, after the pack's default.
            let v: serde_json::Value = serde_json::from_str(&m.info_json()).map_err(|e| Error::format(format!("info JSON: {e}")))?;
            print_line(&serde_json::to_string_pretty(&v).unwrap_or_default())
        }
        "tokenize" => {
            let text = args.value(&["--text"])?.ok_or_else(|| Error::invalid("--text is required"))?;
            let special = !args.flag("--no-special");
            let m = open(pack, args)?;
            args.done()?;
            let ids = m.tokenize(&text, special, special)?;
            print_line(&serde_json::to_string(&ids).unwrap_or_default())
        }
        "logits" => logits(pack, args),
        "generate" => cmd_generate(pack, args),
        "embed" => cmd_embed(pack, args),
        "export-onnx" => export_onnx(pack, args),
        other => Err(Error::invalid(format!("unknown command {other:?}\n{USAGE}"))),
    }
}

/// `--lora PATH[:SCALE]`, as often as given, in order: each adapter's path and scale (1.0
/// unless given). A path that exists is taken whole, so a path with a colon in it needs no
/// scale; otherwise what follows the last colon is the scale, a finite number.
fn lora_args(args: &mut Args) -> Result<Vec<(String, f32)>> {
    scaled_paths(args, "--lora")
}

/// `flag PATH[:SCALE]`, as often as given, in order (the rule of `lora_args`).
fn scaled_paths(args: &mut Args, flag: &str) -> Result<Vec<(String, f32)>> {
    let mut found = Vec::new();
    while let Some(v) = args.value(&[flag])? {
        let spec = match v.rsplit_once(':') {
            Some((path, scale)) if !Path::new(&v).exists() => {
                let scale: f32 = scale.parse().map_err(|_| Error::invalid(format!("{flag} {v:?}: the scale {scale:?} after the last ':' is not a number")))?;
                if !scale.is_finite() {
                    return Err(Error::invalid(format!("{flag} {v:?}: the scale {scale} is not finite")));
                }
                (path.to_string(), scale)
            }
            _ => (v, 1.0),
        };
        found.push(spec);
    }
    Ok(found)
}

/// Opens the `--lora` adapters for `m`; an error names the flag and the path once (the library's
/// message names the tensor or key that does not fit, most often after the path).
fn open_adapters(m: &Model, lora: &[(String, f32)]) -> Result<Vec<(Adapter, f32)>> {
    let named = |path: &str, e: Error| {
        let message = if e.message.starts_with(path) { format!("--lora {}", e.message) } else { format!("--lora {path}: {}", e.message) };
        Error::new(e.status, message)
    };
    lora.iter().map(|(path, scale)| Adapter::open(m, path).map(|a| (a, *scale)).map_err(|e| named(path, e))).collect()
}

/// `--control-vector PATH[:SCALE]` (repeatable) and `--control-vector-layers START-END`.
struct CvecArgs {
    files: Vec<(String, f32)>,
    layers: Option<(usize, usize)>,
}

fn cvec_args(args: &mut Args) -> Result<CvecArgs> {
    let files = scaled_paths(args, "--control-vector")?;
    let layers = match args.value(&["--control-vector-layers"])? {
        None => None,
        Some(v) => {
            let bad = || Error::invalid(format!("--control-vector-layers {v:?}: START-END, two layer numbers (0-based, inclusive)"));
            let (a, b) = v.split_once('-').ok_or_else(bad)?;
            Some((a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?))
        }
    };
    if layers.is_some() && files.is_empty() {
        return Err(Error::invalid("--control-vector-layers needs at least one --control-vector"));
    }
    Ok(CvecArgs { files, layers })
}

/// The `--control-vector` files' sum for `m` (None without one); an error names the flag.
fn open_control_vector(m: &Model, c: &CvecArgs) -> Result<Option<ControlVector>> {
    if c.files.is_empty() {
        return Ok(None);
    }
    let last = m.info().n_layers.saturating_sub(1);
    let (start, end) = c.layers.unwrap_or((1.min(last), last));
    ControlVector::open_gguf(m, &c.files, start, end).map(Some).map_err(|e| Error::new(e.status, format!("--control-vector: {}", e.message)))
}

/// A new session on `m` that runs `adapters` and `control` (none: the base model).
fn session_with(m: &Model, adapters: &[(Adapter, f32)], control: Option<&ControlVector>) -> Result<Session> {
    let mut s = m.session()?;
    if !adapters.is_empty() {
        s.set_adapters(adapters)?;
    }
    if control.is_some() {
        s.set_control_vector(control)?;
    }
    Ok(s)
}

fn logits(pack: &str, args: &mut Args) -> Result<()> {
    let tokens = args.value(&["--tokens"])?.ok_or_else(|| Error::invalid("--tokens is required"))?;
    let out = args.value(&["--out"])?.ok_or_else(|| Error::invalid("--out is required"))?;
    let all = args.flag("--all");
    let lora = lora_args(args)?;
    let cvec = cvec_args(args)?;
    let m = open(pack, args)?;
    args.done()?;
    let ids: Vec<u32> = tokens
        .split(',')
        .map(|t| t.trim().parse().map_err(|_| Error::invalid(format!("--tokens: {t:?} is not a token id"))))
        .collect::<Result<_>>()?;
    let adapters = open_adapters(&m, &lora)?;
    let control = open_control_vector(&m, &cvec)?;
    let mut s = session_with(&m, &adapters, control.as_ref())?;
    let logits = s.step_batch(&ids, if all { Want::All } else { Want::Last })?;
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&out, bytes).map_err(|e| Error::io(Path::new(&out), e))
}

/// `export-onnx PACK DIR`: the model on the npu backend with every graph written to DIR as it
/// is compiled, then the passes whose graphs are written: a prefill of the tokens (every row's
/// logits wanted) and one decode step (the prefill's greedy token). Beside the graphs: their
/// prefill and step logits as computed (`logits.f32`, rows x vocab then the step's row), and
/// `export.json` naming the tokens. Prints what was written.
fn export_onnx(pack: &str, args: &mut Args) -> Result<()> {
    let dir = args.rest.first().filter(|a| !a.starts_with("--")).cloned().ok_or_else(|| Error::invalid("export-onnx PACK DIR: DIR is required"))?;
    args.rest.remove(0);
    let tokens = args.value(&["--tokens"])?;
    let mut opts = OpenOptions { threads: args.parsed(&["--threads"], 0usize)?, ..OpenOptions::default() }.backend(Backend::Npu).export_onnx(&dir);
    opts.provider = args.value(&["--ep"])?;
    opts.provider_options = args.value(&["--ep-options"])?.unwrap_or_default();
    opts.onnxruntime = args.value(&["--onnxruntime"])?;
    opts.compile_ahead = args.parsed(&["--compile-ahead"], 0usize)?;
    args.done()?;
    let m = Model::open_with(pack, &opts)?;
    let ids: Vec<u32> = match tokens {
        Some(t) => t.split(',').map(|t| t.trim().parse().map_err(|_| Error::invalid(format!("--tokens: {t:?} is not a token id")))).collect::<Result<_>>()?,
        None => m.tokenize("The capital of France is", true, false)?,
    };
    if ids.is_empty() {
        return Err(Error::invalid("export-onnx: no tokens to run"));
    }
    let mut s = Session::new(&m, 0)?;
    let mut logits = s.step_batch(&ids, Want::All)?;
    let vocab = m.info().n_vocab;
    let last = &logits[(ids.len() - 1) * vocab..];
    // The greedy token (the first of the largest).
    let next = (0..vocab).fold(0, |b, i| if last[i] > last[b] { i } else { b }) as u32;
    logits.extend(s.step(next)?);
    let path = Path::new(&dir).join("logits.f32");
    std::fs::write(&path, logits.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).map_err(|e| Error::io(&path, e))?;
    let about = serde_json::json!({"tokens": ids, "step_token": next, "vocab": vocab, "logits": "logits.f32", "graphs": "graphs.json"});
    let path = Path::new(&dir).join("export.json");
    std::fs::write(&path, serde_json::to_string_pretty(&about).unwrap_or_default() + "\n").map_err(|e| Error::io(&path, e))?;
    print_line(&serde_json::to_string(&about).unwrap_or_default())
}

/// The options `generate` and `generate --parallel` share.
struct GenerateArgs {
    chat: bool,
    parse_special: bool,
    json: bool,
    n_new: usize,
    sampler: SamplerParams,
    seed: u64,
    lora: Vec<(String, f32)>,
    cvec: CvecArgs,
}

impl GenerateArgs {
    fn read(args: &mut Args) -> Result<GenerateArgs> {
        let chat = args.flag("--chat");
        let parse_special = !args.flag("--no-special");
        if chat && !parse_special {
            return Err(Error::invalid("--no-special applies to a plain --prompt: --chat renders the template, whose markers are special tokens"));
        }
        let json = args.flag("--json");
        let n_new: usize = args.parsed(&["-n", "--n"], 64)?;
        let temp: f32 = args.parsed(&["--temp"], 0.0)?;
        let seed: u64 = args.parsed(&["--seed"], 0)?;
        let sampler = SamplerParams { temperature: temp, ..Default::default() };
        sampler.check().map_err(|e| Error::invalid(format!("--temp: {}", e.message)))?;
        let lora = lora_args(args)?;
        let cvec = cvec_args(args)?;
        Ok(GenerateArgs { chat, parse_special, json, n_new, sampler, seed, lora, cvec })
    }
}

/// A prompt's tokens: through the chat template (`chat`), else as text (special-token text
/// parsed unless `parse_special` is false). Refuses a prompt with no tokens.
fn prompt_tokens(m: &Model, prompt: &str, chat: bool, parse_special: bool) -> Result<Vec<u32>> {
    let ids = if chat {
        let text = m.chat_apply(&[ChatMessage { role: "user".into(), content: prompt.to_string() }], true)?;
        m.tokenize(&text, true, true)?
    } else {
        m.tokenize(prompt, true, parse_special)?
    };
    if ids.is_empty() {
        return Err(Error::invalid("the prompt has no tokens"));
    }
    Ok(ids)
}

/// `generate --parallel N`: every --prompt answered (`--samples K` times each), N sessions
/// stepping together.
fn cmd_generate_parallel(pack: &str, args: &mut Args, n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid("--parallel 0: at least one session"));
    }
    let mut prompts = Vec::new();
    while let Some(p) = args.value(&["--prompt"])? {
        prompts.push(p);
    }
    if prompts.is_empty() {
        return Err(Error::invalid("--prompt is required (once per prompt)"));
    }
    let samples: usize = args.parsed(&["--samples"], 1)?;
    if samples == 0 {
        return Err(Error::invalid("--samples 0: at least one reply per prompt"));
    }
    let GenerateArgs { chat, parse_special, json, n_new, sampler, seed, lora, cvec } = GenerateArgs::read(args)?;
    let m = open(pack, args)?;
    args.done()?;
    let ids: Vec<Vec<u32>> = prompts.iter().map(|p| prompt_tokens(&m, p, chat, parse_special)).collect::<Result<_>>()?;
    let adapters = open_adapters(&m, &lora)?;
    let control = open_control_vector(&m, &cvec)?;
    // Each reply: (prompt, sample), answered with seed + sample.
    let jobs: Vec<(usize, usize)> = (0..ids.len()).flat_map(|p| (0..samples).map(move |j| (p, j))).collect();
    let t0 = Instant::now();
    let mut replies: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
    for (batch, batch_replies) in jobs.chunks(n).zip(replies.chunks_mut(n)) {
        let prompts: Vec<&[u32]> = batch.iter().map(|&(p, _)| &ids[p][..]).collect();
        let seeds: Vec<u64> = batch.iter().map(|&(_, j)| seed.wrapping_add(j as u64)).collect();
        parallel_replies(&m, &adapters, control.as_ref(), &prompts, &seeds, batch_replies, n_new, &sampler)?;
    }
    let total_s = t0.elapsed().as_secs_f64();
    let generated: usize = replies.iter().map(Vec::len).sum();
    for (i, (reply, &(p, j))) in replies.iter().zip(&jobs).enumerate() {
        let text = m.detokenize(reply, true)?;
        if json {
            print_line(&serde_json::json!({ "prompt": p, "sample": j, "tokens": reply, "text": text, "prompt_tokens": ids[p].len() }).to_string())?;
        } else {
            print_line(&format!("[{i}] {text}"))?;
        }
    }
    if json {
        print_line(&serde_json::json!({ "prompts": ids.len(), "samples": samples, "parallel": n, "generated_tokens": generated, "tok_s": generated as f64 / total_s.max(1e-9) }).to_string())?;
    }
    Ok(())
}

/// The replies to `prompts`, their sessions stepped together: each session's token choice is
/// `Generate`'s (the same sampler, recent tokens and random state from its seed), so each
/// reply is the one a lone `generate` gives. Equal prompts are prefilled once: the first one's
/// session steps it, the others are forks of that session (which keep its `adapters` and
/// `control`).
#[allow(clippy::too_many_arguments)]
fn parallel_replies(m: &Model, adapters: &[(Adapter, f32)], control: Option<&ControlVector>, prompts: &[&[u32]], seeds: &[u64], replies: &mut [Vec<u32>], n_new: usize, sampler: &SamplerParams) -> Result<()> {
    let first: Vec<usize> = prompts.iter().enumerate().map(|(i, p)| prompts[..i].iter().position(|q| q == p).unwrap_or(i)).collect();
    let mut own: Vec<Option<Session>> = first.iter().enumerate().map(|(i, &f)| if f == i { session_with(m, adapters, control).map(Some) } else { Ok(None) }).collect::<Result<_>>()?;
    let mut items: Vec<StepItem> = own.iter_mut().zip(prompts).filter_map(|(s, p)| Some(StepItem { session: s.as_mut()?, tokens: p, want: Want::Last })).collect();
    Session::step_many(&mut items)?;
    drop(items);
    let mut sessions: Vec<Session> = Vec::with_capacity(prompts.len());
    for (i, &f) in first.iter().enumerate() {
        let s = if f == i { own[i].take() } else { sessions.get(f).map(Session::fork) };
        sessions.push(s.expect("a prompt's first session is made before its forks"));
    }
    let mut rng = seeds.to_vec();
    let mut active: Vec<usize> = (0..prompts.len()).collect();
    let mut feed: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    loop {
        active.retain(|&i| {
            let s = &sessions[i];
            let Ok(t) = packlm::sample(s.last_logits(), sampler, s.tokens(), &mut rng[i]) else { return false };
            if replies[i].len() >= n_new || m.is_stop(t) {
                return false;
            }
            replies[i].push(t);
            feed[i] = vec![t];
            replies[i].len() < n_new && s.n_past() < s.n_ctx()
        });
        if active.is_empty() {
            return Ok(());
        }
        let mut items: Vec<StepItem> = sessions
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| active.contains(i))
            .map(|(i, s)| StepItem { session: s, tokens: &feed[i], want: Want::Last })
            .collect();
        Session::step_many(&mut items)?;
    }
}

/// `--json-schema FILE`, `--grammar FILE` (llama.cpp's GBNF or llguidance's Lark, told apart by
/// `GrammarKind::of_grammar`) or `--regex RE`: at most one.
fn grammar_arg(args: &mut Args) -> Result<Option<(GrammarKind, String)>> {
    let read = |flag: &str, path: String| std::fs::read_to_string(&path).map_err(|e| Error::io(Path::new(&path), e)).map_err(|e| Error::new(e.status, format!("{flag}: {}", e.message)));
    let mut found = Vec::new();
    if let Some(p) = args.value(&["--json-schema"])? {
        found.push((GrammarKind::JsonSchema, read("--json-schema", p)?));
    }
    if let Some(p) = args.value(&["--grammar"])? {
        let text = read("--grammar", p)?;
        found.push((GrammarKind::of_grammar(&text), text));
    }
    if let Some(re) = args.value(&["--regex"])? {
        found.push((GrammarKind::Regex, re));
    }
    if found.len() > 1 {
        return Err(Error::invalid("--json-schema, --grammar and --regex: give at most one"));
    }
    Ok(found.pop())
}

fn cmd_generate(pack: &str, args: &mut Args) -> Result<()> {
    let parallel: Option<usize> = args.value(&["--parallel"])?.map(|v| v.parse().map_err(|_| Error::invalid(format!("--parallel: cannot parse {v:?}")))).transpose()?;
    if let Some(n) = parallel {
        return cmd_generate_parallel(pack, args, n);
    }
    let prompt = args.value(&["--prompt"])?.ok_or_else(|| Error::invalid("--prompt is required"))?;
    let GenerateArgs { chat, parse_special, json, n_new, sampler, seed, lora, cvec } = GenerateArgs::read(args)?;
    let draft = args.value(&["--draft"])?;
    let draft_k: usize = args.parsed(&["--draft-k"], 8)?;
    let grammar = grammar_arg(args)?;
    let m = open(pack, args)?;
    args.done()?;
    let prompt_ids = prompt_tokens(&m, &prompt, chat, parse_special)?;
    let adapters = open_adapters(&m, &lora)?;
    let control = open_control_vector(&m, &cvec)?;
    let constraint = grammar.map(|(kind, text)| Constraint::new(&m, kind, &text)).transpose()?;
    let mut drafter: Option<Box<dyn Drafter>> = match draft.as_deref() {
        None => None,
        Some("ngram") => Some(Box::new(NgramDrafter::default())),
        Some(path) => Some(Box::new(ModelDrafter::new(&Model::open(path)?, &m)?)),
    };
    // The adapters and control vector apply to this model's session only; a draft model runs
    // as it is.
    let mut s = session_with(&m, &adapters, control.as_ref())?;
    // Prefill timed alone, then the generation loop (whose first pass is the prompt's last row).
    let t0 = Instant::now();
    let (head, last) = prompt_ids.split_at(prompt_ids.len() - 1);
    if !head.is_empty() {
        s.step_batch(head, Want::None)?;
    }
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let options = GenerateOptions { max_tokens: n_new, sampler, seed, drafter: drafter.as_deref_mut(), draft_k, skip_special: true, constraint };
    let mut stream = s.generate(last, options);
    let (mut tokens, mut text) = (Vec::new(), String::new());
    let mut out = std::io::stdout().lock();
    let write_err = |e: std::io::Error| Error::new(packlm::Status::ErrIo, format!("writing to stdout: {e}"));
    for token in &mut stream {
        let token = token?;
        tokens.push(token.id);
        if json {
            text.push_str(&token.text);
        } else {
            // The reply as it comes: every piece is whole UTF-8 (see `packlm::Detokenizer`).
            out.write_all(token.text.as_bytes()).and_then(|_| out.flush()).map_err(write_err)?;
        }
    }
    let rest = stream.rest()?;
    let (rounds, drafted, accepted) = stream.draft_counters();
    let decode_s = t1.elapsed().as_secs_f64();
    if !json {
        return writeln!(out, "{rest}").and_then(|_| out.flush()).map_err(write_err);
    }
    drop(out);
    text.push_str(&rest);
    let mut v = serde_json::json!({
        "tokens": tokens,
        "text": text,
        "prompt_tokens": prompt_ids.len(),
        "prefill_tok_s": head.len() as f64 / prefill_s.max(1e-9),
        "decode_tok_s": tokens.len() as f64 / decode_s.max(1e-9),
    });
    if draft.is_some() {
        v["drafted"] = drafted.into();
        v["accepted"] = accepted.into();
        v["rounds"] = rounds.into();
    }
    print_line(&v.to_string())
}

/// `embed`: every --text's vector (or token vectors), as one JSON object; see the module's doc.
fn cmd_embed(pack: &str, args: &mut Args) -> Result<()> {
    let mut texts = Vec::new();
    while let Some(t) = args.value(&["--text"])? {
        texts.push(t);
    }
    if texts.is_empty() {
        return Err(Error::invalid("--text is required (once per text)"));
    }
    let pooling = match args.value(&["--pooling"])? {
        None => None,
        Some(v) => Some(Pooling::from_name(&v).ok_or_else(|| Error::invalid(format!("--pooling {v:?}: none, mean, cls or last")))?),
    };
    let normalize = match (args.flag("--normalize"), args.flag("--no-normalize")) {
        (true, true) => return Err(Error::invalid("--normalize and --no-normalize: give at most one")),
        (true, false) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    };
    let lora = lora_args(args)?;
    let cvec = cvec_args(args)?;
    let m = open(pack, args)?;
    args.done()?;
    let ids: Vec<Vec<u32>> = texts.iter().map(|t| m.tokenize(t, true, false)).collect::<Result<_>>()?;
    let adapters = open_adapters(&m, &lora)?;
    let control = open_control_vector(&m, &cvec)?;
    let mut s = session_with(&m, &adapters, control.as_ref())?;
    let rows: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let e = s.embed(&rows, &EmbedOptions { pooling, normalize })?;
    // Per text: its vector, or (pooling none) its token vectors, rows taken in text order.
    let embeddings: Vec<TextVectors> = if e.pooling == Pooling::None {
        let mut next = 0;
        ids.iter()
            .map(|t| {
                let rows = (next..next + t.len()).map(|r| e.row(r).to_vec()).collect();
                next += t.len();
                TextVectors::Tokens(rows)
            })
            .collect()
    } else {
        (0..e.rows()).map(|i| TextVectors::Pooled(e.row(i).to_vec())).collect()
    };
    let reply = EmbedReply { model: pack, pooling: e.pooling.name(), normalized: e.normalized, dim: e.dim, embeddings, tokens: &ids };
    // Serialized from f32 (not through serde_json::Value's f64): each value printed shortest.
    let text = serde_json::to_string(&reply).map_err(|err| Error::format(format!("embeddings JSON: {err}")))?;
    print_line(&text)
}

/// `embed`'s output; `embeddings[i]` is text i's.
#[derive(serde::Serialize)]
struct EmbedReply<'a> {
    model: &'a str,
    pooling: &'static str,
    normalized: bool,
    dim: usize,
    embeddings: Vec<TextVectors>,
    tokens: &'a [Vec<u32>],
}

/// One text's part of `embed`'s output: its pooled vector, or one vector per token.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum TextVectors {
    Pooled(Vec<f32>),
    Tokens(Vec<Vec<f32>>),
}
