//! The graph backend (src/backend/graph): the engine's op stream as ONNX graphs, run by ONNX
//! Runtime's CPU execution provider. ONNX Runtime's library is found by PACKLM_ONNXRUNTIME
//! (CI installs it from the `onnxruntime` wheel); every test here skips, saying so, only when it
//! cannot be loaded AND PACKLM_REQUIRE_ONNXRUNTIME is unset. CI sets it, so a missing runtime
//! fails there.

mod common;

use std::sync::Arc;

use common::*;
use packlm::backend::graph::{GraphBackend, GraphOptions};
use packlm::backend::BackendKind;
use packlm::engine::{Model, Session, Want};

/// A graph backend on the CPU provider, or None (with a note) when ONNX Runtime is not at hand
/// and not required.
fn backend() -> Option<GraphBackend> {
    match GraphBackend::new(&GraphOptions::default(), 1) {
        Ok(b) => Some(b),
        Err(e) if std::env::var_os("PACKLM_REQUIRE_ONNXRUNTIME").is_none() => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("PACKLM_REQUIRE_ONNXRUNTIME is set and the graph backend is unavailable: {e}"),
    }
}

fn open_graph(path: &std::path::Path) -> Option<Arc<Model>> {
    let be = backend()?;
    Some(Arc::new(Model::open_on(path, Box::new(be)).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))))
}

/// Every family's tiny golden fixture within 1e-4 of HF (f32 on both sides), mixtures of
/// experts included (routed in the graph, every expert over every row).
#[test]
fn golden_fixtures_of_every_family_match_hf() {
    if backend().is_none() {
        return;
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures().join("tiny")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("golden.json").is_file() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let m = Arc::new(Model::open_on(&dir, Box::new(backend().unwrap())).unwrap_or_else(|e| panic!("{name}: {e}")));
        let g = golden(&dir);
        let got = all_rows(&m, &g.tokens);
        let d = max_abs_diff(&got, &g.logits);
        eprintln!("{name} (graph, cpu provider): max |packlm - HF| = {d:e}");
        assert!(d <= TOL_F32, "{name}: max |packlm - HF| = {d} > {TOL_F32}");
        let st = stepped(&m, &g.tokens);
        let d = max_abs_diff(&st, &g.logits);
        eprintln!("{name} (graph, stepped): max |packlm - HF| = {d:e}");
        assert!(d <= TOL_F32, "{name} stepped: max |packlm - HF| = {d} > {TOL_F32}");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} fixtures checked");
}

/// A copy of the gemma3 fixture (sliding and full layers) with a context of 512, in a folder
/// of its own (`tag`); the caller removes it.
fn long_context(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("packlm-graph-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(tiny("gemma3")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["max_position_embeddings"] = 512.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    dir
}

/// Bits that hold past the KV buckets and the pass size: 300 positions (buckets 64 to 512, the
/// matrix products' K blocks) as one step_batch (parts of 128 rows) and as steps; and two
/// threads as one.
#[test]
fn long_passes_and_threads_keep_the_bits() {
    if backend().is_none() {
        return;
    }
    let dir = long_context("long");
    let m = open_graph(&dir).unwrap();
    let v = m.spec().vocab_size as u32;
    let tokens: Vec<u32> = (0..300u32).map(|i| (i * 7 + 3) % v).collect();
    let batched = all_rows(&m, &tokens);
    let mut s = Session::new(m.clone(), 0).unwrap();
    let mut st = s.step_batch(&tokens[..100], Want::All).unwrap();
    for &t in &tokens[100..] {
        st.extend(s.step(t).unwrap());
    }
    assert_bits_equal(&batched, &st, "300 positions: batched vs a prefill of 100 and steps");
    let two = GraphBackend::new(&GraphOptions::default(), 2).unwrap();
    let m2 = Arc::new(Model::open_on(&dir, Box::new(two)).unwrap());
    assert_bits_equal(&batched, &all_rows(&m2, &tokens), "two threads vs one");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One graph per pass shape: a second session's passes of the shapes the first compiled
/// compile nothing, and a decode step hands the provider its token id and position and takes
/// back its logits, nothing else: the KV is read and written in place (the cpu provider's memory
/// is the host's) and the pass's activations, forgotten by the engine, are not brought back.
#[test]
fn graphs_compile_once_per_shape_and_a_step_moves_no_kv() {
    let Some(be) = backend() else { return };
    let dir = tiny("llama");
    let m = Arc::new(Model::open_on(&dir, Box::new(be)).unwrap());
    let tokens: Vec<u32> = golden(&dir).tokens.into_iter().take(10).collect();
    let counters = || m.backend().counters().unwrap();
    let run = || {
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&tokens[..8], Want::Last).unwrap();
        for &t in &tokens[8..] {
            s.step(t).unwrap();
        }
        s
    };
    let c0 = counters();
    run();
    let c1 = counters();
    assert_eq!(c1.graphs_compiled - c0.graphs_compiled, 2, "a prefill of 8 rows and a decode step (KV bucket 64)");
    let mut s = run();
    let c2 = counters();
    assert_eq!(c2.graphs_compiled, c1.graphs_compiled, "the same shapes again compile nothing");
    assert_eq!(c2.submissions - c1.submissions, 3, "one run per pass");
    // One decode step at a KV of 10 positions: the bytes in are its token and positions (no KV).
    let spec = m.spec();
    s.step(tokens[0]).unwrap();
    let c3 = counters();
    assert_eq!(c3.graphs_compiled, c2.graphs_compiled);
    let kv_row: usize = spec.layers.iter().filter(|l| matches!(l.kv_source, packlm::semantics::KvSource::Own)).map(|l| 2 * l.kv_width() * 4).sum();
    let held_kv = 10 * kv_row;
    let bytes_in = (c3.bytes_written - c2.bytes_written) as usize;
    eprintln!("decode step: {bytes_in} bytes in, {} bytes out; the KV held is {held_kv} bytes", c3.bytes_read - c2.bytes_read);
    assert_eq!(bytes_in, 16, "a step hands in its token id and its position (8 bytes each)");
    let out = (c3.bytes_read - c2.bytes_read) as usize;
    assert_eq!(out, spec.vocab_size * 4, "a step takes back its logits alone");
    assert_eq!(c3.kv_bytes_read, c2.kv_bytes_read, "no KV was read out");
}

/// Prefills of every length from 1 to 40 compile eleven graphs: parts of 1, 2, 4, .., 32 rows (a
/// pass runs as parts of powers of two), each as the last part (with the logits) or an earlier
/// one (without), but a part of one row, always last. Each prefill's logits are the bits of the
/// same tokens stepped.
#[test]
fn prefills_of_any_length_share_eleven_graphs() {
    let Some(be) = backend() else { return };
    let m = Arc::new(Model::open_on(&tiny("llama"), Box::new(be)).unwrap());
    let tokens: Vec<u32> = (0..40u32).map(|i| (i * 11 + 2) % 300).collect();
    let c0 = m.backend().counters().unwrap().graphs_compiled;
    let mut lasts = Vec::new();
    for n in 1..=tokens.len() {
        let mut s = Session::new(m.clone(), 0).unwrap();
        lasts.push(s.step_batch(&tokens[..n], Want::Last).unwrap());
    }
    assert_eq!(m.backend().counters().unwrap().graphs_compiled - c0, 11, "40 prefill lengths");
    let st = stepped(&m, &tokens);
    let v = m.spec().vocab_size;
    for (n, last) in lasts.iter().enumerate() {
        assert_bits_equal(last, &st[n * v..(n + 1) * v], &format!("a prefill of {} rows vs steps", n + 1));
    }
}

/// A snapshot moves between the host and graph backends: taken on one, restored on the other,
/// the next logits are those of a fresh session there within the f32 tolerance.
#[test]
fn snapshots_move_between_host_and_graph() {
    if backend().is_none() {
        return;
    }
    let dir = tiny("gemma3");
    let (g, h) = (open_graph(&dir).unwrap(), open_with(&dir, BackendKind::Host, 1));
    let tokens: Vec<u32> = golden(&dir).tokens.into_iter().take(9).collect();
    for (from, to, what) in [(&g, &h, "graph -> host"), (&h, &g, "host -> graph")] {
        let mut a = Session::new(from.clone(), 0).unwrap();
        a.step_batch(&tokens[..8], Want::None).unwrap();
        let mut b = Session::new(to.clone(), 0).unwrap();
        b.restore(&a.snapshot()).unwrap();
        let mut fresh = Session::new(to.clone(), 0).unwrap();
        fresh.step_batch(&tokens[..8], Want::None).unwrap();
        let d = max_abs_diff(&b.step(tokens[8]).unwrap(), &fresh.step(tokens[8]).unwrap());
        eprintln!("{what}: max diff {d:e}");
        assert!(d <= TOL_F32, "{what}: {d}");
    }
}

/// The weights as initializers compiled into each graph, as the device providers take them
/// (on the cpu provider they are inputs read in place): the same goldens, and the same bits as
/// the inputs' path (one product, two ways of handing ONNX Runtime the weights).
#[test]
fn weights_as_initializers_give_the_same_bits() {
    if backend().is_none() {
        return;
    }
    for fixture in ["llama", "gemma3", "qwen3_moe"] {
        let dir = tiny(fixture);
        let opts = GraphOptions { initializers: true, ..GraphOptions::default() };
        let init = Arc::new(Model::open_on(&dir, Box::new(GraphBackend::new(&opts, 1).unwrap())).unwrap());
        let inputs = open_graph(&dir).unwrap();
        let g = golden(&dir);
        let a = all_rows(&init, &g.tokens);
        assert!(max_abs_diff(&a, &g.logits) <= TOL_F32, "{fixture}: initializers vs HF");
        assert_bits_equal(&a, &all_rows(&inputs, &g.tokens), &format!("{fixture}: initializers vs inputs"));
        assert_bits_equal(&a, &stepped(&init, &g.tokens), &format!("{fixture}: initializers, batched vs stepped"));
    }
}

/// Greedy decoding of real models at exact: the same 24 tokens as the host backend.
#[test]
fn real_models_continue_as_the_host_does() {
    if backend().is_none() {
        return;
    }
    for path in [smollm2(), gemma3_270m()].into_iter().flatten() {
        let graph = open_graph(&path).unwrap();
        let host = Arc::new(Model::open(&path, &packlm::engine::OpenOptions::new(BackendKind::Host, 0, packlm::backend::Precision::Exact)).unwrap());
        let prompt = graph.vocab().encode("The capital of France is", true, false).unwrap();
        let greedy = |m: &Arc<Model>| {
            let mut s = Session::new(m.clone(), 0).unwrap();
            let mut next = packlm::sample::argmax(&s.step_batch(&prompt, Want::Last).unwrap());
            let mut out = vec![next];
            for _ in 1..24 {
                next = packlm::sample::argmax(&s.step(next).unwrap());
                out.push(next);
            }
            out
        };
        let (a, b) = (greedy(&graph), greedy(&host));
        eprintln!("{}: graph {a:?}", path.display());
        assert_eq!(a, b, "{}: graph vs host greedy tokens", path.display());
    }
}

/// Sets a session's abort flag when the pass's second part begins (its second embedding).
struct AbortAtSecondPart {
    flag: std::sync::Mutex<Option<Arc<std::sync::atomic::AtomicBool>>>,
    embeds: std::sync::atomic::AtomicUsize,
}

impl packlm::backend::watched::Watch for AbortAtSecondPart {
    fn matrix(&self, _w: &packlm::pack::tensor::WeightTensor) -> usize {
        0
    }
    fn around(&self, call: packlm::backend::watched::Call, run: &mut dyn FnMut()) {
        if call == packlm::backend::watched::Call::Op("embed") && self.embeds.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            if let Some(f) = self.flag.lock().unwrap().as_ref() {
                f.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        run()
    }
}

/// An abort between the parts of a long prefill (the first part of 128 rows ran, the second
/// was being recorded) fails it with ErrAborted and leaves the session as it was: the same
/// snapshot, and the same next logits as a session that never saw the prefill, bit for bit.
#[test]
fn an_abort_between_parts_leaves_the_session_as_it_was() {
    let Some(be) = backend() else { return };
    let watch = Arc::new(AbortAtSecondPart { flag: std::sync::Mutex::new(None), embeds: 0.into() });
    struct Shared(Arc<AbortAtSecondPart>);
    impl packlm::backend::watched::Watch for Shared {
        fn matrix(&self, w: &packlm::pack::tensor::WeightTensor) -> usize {
            self.0.matrix(w)
        }
        fn around(&self, call: packlm::backend::watched::Call, run: &mut dyn FnMut()) {
            self.0.around(call, run)
        }
    }
    let watched = packlm::backend::watched::Watched { inner: Box::new(be), watcher: Shared(watch.clone()) };
    let dir = long_context("abort");
    let m = Arc::new(Model::open_on(&dir, Box::new(watched)).unwrap());
    let v = m.spec().vocab_size as u32;
    let mut s = Session::new(m.clone(), 0).unwrap();
    let first = s.step_batch(&[1, 2, 3], Want::Last).unwrap();
    let before = s.snapshot();
    let runs = m.backend().counters().unwrap().submissions;
    *watch.flag.lock().unwrap() = Some(s.abort_flag().clone());
    watch.embeds.store(0, std::sync::atomic::Ordering::SeqCst);
    let long: Vec<u32> = (0..200u32).map(|i| (i * 5 + 1) % v).collect();
    let e = s.step_batch(&long, Want::Last).unwrap_err();
    assert_eq!(e.status, packlm::error::Status::ErrAborted, "{e:?}");
    assert_eq!(m.backend().counters().unwrap().submissions - runs, 1, "the first part ran, the second did not");
    s.abort_flag().store(false, std::sync::atomic::Ordering::SeqCst);
    *watch.flag.lock().unwrap() = None;
    assert!(s.snapshot() == before, "the session changed");
    let mut fresh = Session::new(m.clone(), 0).unwrap();
    assert_bits_equal(&fresh.step_batch(&[1, 2, 3], Want::Last).unwrap(), &first, "fresh prefill");
    assert_bits_equal(&s.step(9).unwrap(), &fresh.step(9).unwrap(), "after the abort vs fresh");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sessions of one model on two threads at once: each records and runs its own graphs, and
/// each gets the bits it gets alone.
#[test]
fn sessions_on_two_threads_get_their_own_bits() {
    let Some(be) = backend() else { return };
    let m = Arc::new(Model::open_on(&tiny("llama"), Box::new(be)).unwrap());
    let run = |m: Arc<Model>, first: u32| {
        let mut s = Session::new(m, 0).unwrap();
        let mut out = s.step_batch(&[first, 7, 9, 11], Want::Last).unwrap();
        for t in 0..12u32 {
            out.extend(s.step((first + t * 13) % 300).unwrap());
        }
        out
    };
    let alone: Vec<Vec<f32>> = [3, 5].iter().map(|&f| run(m.clone(), f)).collect();
    for _ in 0..3 {
        let handles: Vec<_> = [3u32, 5].iter().map(|&f| { let m = m.clone(); std::thread::spawn(move || run(m, f)) }).collect();
        for (h, want) in handles.into_iter().zip(&alone) {
            assert_bits_equal(&h.join().unwrap(), want, "a session on its own thread vs alone");
        }
    }
}

/// `compile_ahead` compiles at open every graph that sessions of up to that many positions take
/// for prefills, decode steps and step_batch, reported as the open's second half: afterwards,
/// prompts of any length, steps and passes from any position up to there compile nothing. A
/// progress callback that says stop during the compiles ends the open with ErrAborted. An
/// embedding model compiles nothing ahead.
#[test]
fn graphs_compiled_ahead_at_open_serve_every_later_pass() {
    if backend().is_none() {
        return;
    }
    let dir = long_context("ahead");
    let opts = packlm::engine::OpenOptions {
        backend: BackendKind::Npu,
        threads: 1,
        precision: None,
        graph: GraphOptions { compile_ahead: 200, ..GraphOptions::default() },
    };
    let mut fractions = Vec::new();
    let m = Arc::new(Model::open_with_progress(&dir, &opts, &mut |f| {
        fractions.push(f);
        true
    })
    .unwrap());
    assert!(fractions.windows(2).all(|w| w[0] <= w[1]), "fractions decrease: {fractions:?}");
    assert_eq!(fractions.last(), Some(&1.0));
    // 23 pass shapes (graph::ahead_passes), each reported.
    let compiling = fractions.iter().filter(|&&f| f > 0.5 && f < 1.0).count();
    assert!(compiling >= 22, "{compiling} reports while compiling: {fractions:?}");
    let compiled = m.backend().counters().unwrap().graphs_compiled;
    assert!(compiled >= 23, "{compiled} graphs compiled ahead");
    let v = m.spec().vocab_size as u32;
    let tokens: Vec<u32> = (0..200u32).map(|i| (i * 13 + 5) % v).collect();
    for n in [1, 3, 37, 64, 100, 129, 200] {
        let mut s = Session::new(m.clone(), 200).unwrap();
        s.step_batch(&tokens[..n], Want::Last).unwrap();
    }
    let mut s = Session::new(m.clone(), 200).unwrap();
    s.step_batch(&tokens[..20], Want::None).unwrap();
    for &t in &tokens[20..120] {
        s.step(t).unwrap();
    }
    s.step_batch(&tokens[120..127], Want::All).unwrap();
    s.step_batch(&tokens[127..200], Want::Last).unwrap();
    s.truncate(61).unwrap();
    s.step_batch(&tokens[61..70], Want::All).unwrap();
    assert_eq!(m.backend().counters().unwrap().graphs_compiled, compiled, "a pass compiled a graph");
    // Stopped while compiling: ErrAborted, no model.
    let e = Model::open_with_progress(&dir, &opts, &mut |f| f <= 0.6)
    .err()
    .expect("the open went on");
    assert_eq!(e.status, packlm::error::Status::ErrAborted, "{e:?}");
    std::fs::remove_dir_all(&dir).unwrap();
    // An embedding model (bidirectional attention, no sessions' passes) opens as without it.
    let m = Model::open(&tiny("embed_gemma3"), &opts).unwrap();
    assert_eq!(m.backend().counters().unwrap().graphs_compiled, 0);
}

/// A verify on the graph backend is the steps it stands for: drafts that are the greedy
/// continuation are all accepted (5 rows: parts of 4 and 1), a wrong one stops the acceptance
/// before it, and after each the session is the stepped one: the same snapshot and the same last
/// logits, bit for bit.
#[test]
fn verify_is_the_steps_it_stands_for() {
    let Some(m) = open_graph(&tiny("llama")) else { return };
    let tokens: Vec<u32> = golden(&tiny("llama")).tokens.into_iter().take(6).collect();
    let (prompt, pending) = (&tokens[..5], tokens[5]);
    let argmax = packlm::sample::argmax;
    // The greedy continuation, stepped: logits[i] follow pending and the first i drafts.
    let mut r = Session::new(m.clone(), 0).unwrap();
    r.step_batch(prompt, Want::None).unwrap();
    let mut logits = vec![r.step(pending).unwrap()];
    let mut drafts = Vec::new();
    let mut snaps = vec![r.snapshot()];
    for _ in 0..4 {
        drafts.push(argmax(logits.last().unwrap()));
        logits.push(r.step(*drafts.last().unwrap()).unwrap());
        snaps.push(r.snapshot());
    }
    let greedy = packlm::engine::speculative::Acceptance::Greedy;
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(prompt, Want::None).unwrap();
    let out = s.verify(pending, &drafts, greedy).unwrap();
    assert_eq!((out.n_accepted, out.next), (4, argmax(&logits[4])), "every draft accepted");
    assert_bits_equal(s.last_logits(), &logits[4], "verify's last logits vs steps");
    assert!(s.snapshot() == snaps[4], "verify vs steps: the snapshot differs");
    let v = m.spec().vocab_size as u32;
    let wrong = vec![drafts[0], (drafts[1] + 1) % v, drafts[2]];
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(prompt, Want::None).unwrap();
    let out = s.verify(pending, &wrong, packlm::engine::speculative::Acceptance::Greedy).unwrap();
    assert_eq!((out.n_accepted, out.next), (1, drafts[1]), "the second draft rejected");
    assert_bits_equal(s.last_logits(), &logits[1], "after a rejection: last logits vs steps");
    assert!(s.snapshot() == snaps[1], "after a rejection: the snapshot differs from the stepped one");
}

/// A library that is not ONNX Runtime, and one too old for the npu backend: stand-ins compiled
/// here with the system's C compiler, one without `OrtGetApiBase`, one whose `OrtGetApiBase`
/// says it is 1.16.0 and serves no C API version 17 (as ONNX Runtime before 1.17 does). Each
/// open is ErrBackendUnavailable naming the library, and the version where there is one; the
/// process goes on. Needs no ONNX Runtime.
#[test]
fn a_library_that_is_not_onnx_runtime_or_is_too_old_is_named() {
    let dir = std::env::temp_dir().join(format!("packlm-graph-fake-ort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let build = |name: &str, source: &str| {
        let (c, so) = (dir.join(format!("{name}.c")), dir.join(format!("lib{name}.so")));
        std::fs::write(&c, source).unwrap();
        let out = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&c)
            .output()
            .unwrap_or_else(|e| panic!("this test compiles its stand-in libraries with the system's C compiler (cc, or $CC): {e}"));
        assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
        so.to_string_lossy().into_owned()
    };
    let not_ort = build("not_ort", "int packlm_test_symbol(void) { return 1; }\n");
    let too_old = build(
        "old_ort",
        "typedef struct { const void *(*GetApi)(unsigned); const char *(*GetVersionString)(void); } OrtApiBase;\n\
         static const void *get_api(unsigned version) { (void)version; return 0; }\n\
         static const char *version(void) { return \"1.16.0\"; }\n\
         static const OrtApiBase base = { get_api, version };\n\
         const OrtApiBase *OrtGetApiBase(void) { return &base; }\n",
    );
    for (library, says) in [(&not_ort, vec!["is not ONNX Runtime's library", "libnot_ort.so"]), (&too_old, vec!["1.16.0", "1.17 or newer", "libold_ort.so"])] {
        let opts = GraphOptions { library: Some(library.clone()), ..GraphOptions::default() };
        let e = GraphBackend::new(&opts, 1).err().unwrap_or_else(|| panic!("{library} was taken for ONNX Runtime"));
        assert_eq!(e.status, packlm::error::Status::ErrBackendUnavailable, "{e:?}");
        for s in says {
            assert!(e.message.contains(s), "{s:?} not in {:?}", e.message);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
