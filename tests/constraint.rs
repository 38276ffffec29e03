//! Structured output (`Constraint`, `Session::set_constraint`): masks checked against oracles
//! written from the grammars themselves (a regular expression's language, a JSON schema's rules
//! checked by a small validator here, GBNF by the recognizer in common/gbnf.rs) and against
//! llguidance's own Matcher, on the tiny fixture and both real GGUFs; a session's
//! constraint masks what it hands back, rolls back with truncate, survives fork, and judges
//! verify (speculative output under a constraint equals the plain constrained output); bad
//! grammars and misuse are refused with nothing changed.

mod common;

use common::*;
use packlm::{Acceptance, Constraint, GenerateOptions, GrammarKind, Model, NgramDrafter, SamplerParams, Status, Want};

fn models() -> Vec<(String, Model)> {
    let mut out = vec![("tiny llama".to_string(), Model::open(tiny("llama")).unwrap())];
    for p in [smollm2(), gemma3_270m()].into_iter().flatten() {
        out.push((p.display().to_string(), Model::open(&p).unwrap()));
    }
    out
}

/// The regex `[a-z]{2,4}` as an oracle: bytes `so_far + token` can still become a match iff
/// every byte is a lowercase ASCII letter and there are at most 4; a stop token may come iff
/// `so_far` is a match.
#[test]
fn a_regex_mask_is_the_language_of_the_regex() {
    for (name, m) in models() {
        let stop = m.info().stop_tokens.clone();
        let mut c = Constraint::new(&m, GrammarKind::Regex, "[a-z]{2,4}").unwrap();
        let n = m.info().n_vocab;
        let mut so_far: Vec<u8> = Vec::new();
        for step in 0..4 {
            let mut logits = vec![0.0f32; n];
            c.mask(&mut logits).unwrap();
            let mut allowed = Vec::new();
            for (t, &l) in logits.iter().enumerate() {
                let t = t as u32;
                let want = if stop.contains(&t) {
                    (2..=4).contains(&so_far.len())
                } else if m.token_kind(t).unwrap() == packlm::TokenKind::Control {
                    false
                } else {
                    let bytes = m.token_bytes(t, false).unwrap();
                    !bytes.is_empty() && bytes.iter().all(|b| b.is_ascii_lowercase()) && so_far.len() + bytes.len() <= 4
                };
                assert_eq!(l == 0.0, want, "{name}, step {step} after {:?}: token {t} ({:?})", String::from_utf8_lossy(&so_far), m.token_bytes(t, true));
                assert_eq!(c.allows(t).unwrap(), want, "{name}, step {step}: allows({t}) against the mask");
                assert!(l == 0.0 || l == f32::NEG_INFINITY);
                if want && !stop.contains(&t) {
                    allowed.push(t);
                }
            }
            // Take the allowed token with the fewest bytes, so that the run goes on.
            let Some(&t) = allowed.iter().min_by_key(|&&t| (m.token_bytes(t, false).unwrap().len(), t)) else { break };
            c.accept(t).unwrap();
            so_far.extend(m.token_bytes(t, false).unwrap());
        }
        assert!(so_far.len() >= 2, "{name}: the run went on ({so_far:?})");
    }
}

/// A JSON value against the subset of JSON Schema the schemas below use (type, properties,
/// required, additionalProperties false, items, enum, const, minimum / maximum, minItems /
/// maxItems, minLength / maxLength, pattern-free strings), written from the specification.
fn validates(v: &serde_json::Value, s: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value as V;
    if let Some(e) = s.get("enum").and_then(V::as_array) {
        return if e.contains(v) { Ok(()) } else { Err(format!("{v} not in {e:?}")) };
    }
    if let Some(c) = s.get("const") {
        return if c == v { Ok(()) } else { Err(format!("{v} is not {c}")) };
    }
    if let Some(any) = s.get("anyOf").and_then(V::as_array) {
        return if any.iter().any(|s| validates(v, s).is_ok()) { Ok(()) } else { Err(format!("{v} matches no anyOf branch")) };
    }
    let ty = s.get("type").and_then(V::as_str).unwrap_or("");
    let num = |k: &str| s.get(k).and_then(V::as_f64);
    let count = |k: &str| s.get(k).and_then(V::as_u64).map(|x| x as usize);
    match (ty, v) {
        ("object", V::Object(o)) => {
            let props = s.get("properties").and_then(V::as_object).cloned().unwrap_or_default();
            for r in s.get("required").and_then(V::as_array).into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap()) {
                    return Err(format!("missing {r}"));
                }
            }
            for (k, x) in o {
                match props.get(k) {
                    Some(ps) => validates(x, ps).map_err(|e| format!("{k}: {e}"))?,
                    None if s.get("additionalProperties") == Some(&V::Bool(false)) => return Err(format!("extra key {k}")),
                    None => {}
                }
            }
            Ok(())
        }
        ("array", V::Array(a)) => {
            if count("minItems").is_some_and(|n| a.len() < n) || count("maxItems").is_some_and(|n| a.len() > n) {
                return Err(format!("{} items", a.len()));
            }
            match s.get("items") {
                Some(is) => a.iter().try_for_each(|x| validates(x, is)),
                None => Ok(()),
            }
        }
        ("string", V::String(t)) => {
            let n = t.chars().count();
            if count("minLength").is_some_and(|m| n < m) || count("maxLength").is_some_and(|m| n > m) {
                return Err(format!("string of {n} chars"));
            }
            Ok(())
        }
        ("integer", V::Number(x)) if x.is_i64() || x.is_u64() => {
            let f = x.as_f64().unwrap();
            if num("minimum").is_some_and(|m| f < m) || num("maximum").is_some_and(|m| f > m) {
                return Err(format!("{f} out of bounds"));
            }
            Ok(())
        }
        ("number", V::Number(x)) => {
            let f = x.as_f64().unwrap();
            if num("minimum").is_some_and(|m| f < m) || num("maximum").is_some_and(|m| f > m) {
                return Err(format!("{f} out of bounds"));
            }
            Ok(())
        }
        ("boolean", V::Bool(_)) | ("null", V::Null) => Ok(()),
        _ => Err(format!("{v} is not of type {ty:?}")),
    }
}

fn schemas() -> Vec<serde_json::Value> {
    use serde_json::json;
    let s = |max: u64| json!({"type": "string", "minLength": 1, "maxLength": max});
    vec![
        json!({"type": "object", "properties": {"name": s(20), "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}),
        json!({"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 1, "maxItems": 4}),
        json!({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}}, "required": ["color", "ok"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"point": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 10}, "y": {"type": "number", "minimum": 0, "maximum": 10}}, "required": ["x", "y"], "additionalProperties": false}, "label": s(12)}, "required": ["point"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"tags": {"type": "array", "items": s(8), "maxItems": 3}, "note": {"anyOf": [s(10), {"type": "null"}]}}, "required": ["tags", "note"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"kind": {"const": "tool_call"}, "tool": {"enum": ["search", "calc"]}, "args": {"type": "object", "properties": {"q": s(16)}, "required": ["q"], "additionalProperties": false}}, "required": ["kind", "tool", "args"], "additionalProperties": false}),
        json!({"enum": ["yes", "no", "maybe"]}),
        json!({"type": "boolean"}),
        json!({"type": "integer", "minimum": 1, "maximum": 9}),
        // (A bare top-level number is not here: its digits have no bound, and SmolLM2 writes
        // "-1.000..." to the token limit.)
        json!({"type": "object", "properties": {"x": {"type": "number", "minimum": -1, "maximum": 1}, "ok": {"type": "boolean"}}, "required": ["x", "ok"], "additionalProperties": false}),
        s(12),
        json!({"type": "null"}),
        json!({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}),
        json!({"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 5}),
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 100}, "unit": {"enum": ["kg", "g"]}}, "required": ["n", "unit"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"a": s(6), "b": s(6), "c": s(6)}, "required": ["a", "b", "c"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"optional": s(8), "needed": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["needed"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "name": s(8)}, "required": ["id", "name"], "additionalProperties": false}, "maxItems": 2}}, "required": ["items"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2}}, "required": ["matrix"], "additionalProperties": false}),
        // (A ratio as a number in [0, 1] is not here: Gemma3 writes "0.000..." to the token
        // limit; the same digit bound as above.)
        json!({"type": "object", "properties": {"status": {"enum": ["open", "closed"]}, "count": {"type": "integer", "minimum": 0, "maximum": 1000}, "percent": {"type": "integer", "minimum": 0, "maximum": 100}}, "required": ["status", "count", "percent"], "additionalProperties": false}),
        json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["none"]}]}),
        json!({"type": "object", "properties": {"when": {"type": "object", "properties": {"year": {"type": "integer", "minimum": 1900, "maximum": 2100}, "month": {"type": "integer", "minimum": 1, "maximum": 12}}, "required": ["year", "month"], "additionalProperties": false}}, "required": ["when"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"title": s(24), "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 2}}, "required": ["title", "tags"], "additionalProperties": false}),
        json!({"type": "array", "items": s(5), "minItems": 1, "maxItems": 3}),
        json!({"type": "object", "properties": {"answer": {"enum": [1, 2, 3]}}, "required": ["answer"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"flag": {"type": "boolean"}, "note": {"anyOf": [s(6), {"type": "null"}]}}, "required": ["flag", "note"], "additionalProperties": false}),
        // (Latitude and longitude as numbers are not here: Gemma3 at temperature 1 writes a
        // fraction of 200 digits; the same digit bound as above.)
        json!({"type": "object", "properties": {"lat": {"type": "integer", "minimum": -90, "maximum": 90}, "lon": {"type": "integer", "minimum": -180, "maximum": 180}}, "required": ["lat", "lon"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"steps": {"type": "array", "items": s(10), "minItems": 2, "maxItems": 3}, "done": {"type": "boolean"}}, "required": ["steps", "done"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"user": {"type": "object", "properties": {"name": s(10), "admin": {"type": "boolean"}}, "required": ["name", "admin"], "additionalProperties": false}, "level": {"type": "integer", "minimum": 0, "maximum": 5}}, "required": ["user", "level"], "additionalProperties": false}),
    ]
}

/// On the real models (the tiny one when they are missing), each schema's reply at
/// temperature 0 and at temperature 1 with 3 seeds ends at a stop token (allowed only where
/// the grammar may end) and validates: 30 schemas.
#[test]
fn json_schema_replies_validate() {
    assert_eq!(schemas().len(), 30);
    for (name, m) in models() {
        let prompt = m.tokenize("Answer with a JSON value.\n", true, false).unwrap();
        for (i, schema) in schemas().iter().enumerate() {
            for (temp, seed) in [(0.0, 0), (1.0, 1), (1.0, 2), (1.0, 3)] {
                let c = Constraint::new(&m, GrammarKind::JsonSchema, &schema.to_string()).unwrap();
                let mut s = m.session().unwrap();
                let options = GenerateOptions { max_tokens: 200, sampler: SamplerParams { temperature: temp, ..Default::default() }, seed, constraint: Some(c), ..Default::default() };
                let mut stream = s.generate(&prompt, options);
                let (mut text, mut n) = (String::new(), 0);
                for t in &mut stream {
                    text.push_str(&t.unwrap().text);
                    n += 1;
                }
                text.push_str(&stream.rest().unwrap());
                drop(stream);
                let what = format!("{name}, schema {i}, temperature {temp}, seed {seed}: {text:?}");
                // Ended by a stop token, which the mask allows only where the grammar may end.
                assert!(n < 200, "{what}: the reply did not end");
                let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
                validates(&v, schema).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}

/// Speculative decoding under a constraint: the grammar's forced runs drafted (always, under
/// a constraint) and the n-gram drafter's proposals after them give, greedy, the output of
/// stepping one token at a time and taking the argmax of each masked row; forced drafts are
/// proposed and accepted.
#[test]
fn drafted_constrained_output_is_the_plain_constrained_output() {
    for (name, m) in models() {
        let prompt = m.tokenize("List: a, b, a, b, a, b,", true, false).unwrap();
        for (i, schema) in schemas().iter().take(6).enumerate() {
            let schema = schema.to_string();
            // One token at a time.
            let mut s = m.session().unwrap();
            s.step_batch(&prompt, Want::Last).unwrap();
            s.set_constraint(Some(Constraint::new(&m, GrammarKind::JsonSchema, &schema).unwrap())).unwrap();
            let mut plain = Vec::new();
            while plain.len() < 60 {
                let t = packlm::argmax(s.last_logits());
                if m.is_stop(t) {
                    break;
                }
                plain.push(t);
                s.step(t).unwrap();
            }
            for drafted in [false, true] {
                let mut s = m.session().unwrap();
                let mut drafter = NgramDrafter::default();
                let c = Constraint::new(&m, GrammarKind::JsonSchema, &schema).unwrap();
                let options = GenerateOptions { max_tokens: 60, drafter: if drafted { Some(&mut drafter) } else { None }, draft_k: 4, constraint: Some(c), ..Default::default() };
                let mut stream = s.generate(&prompt, options);
                let ids: Vec<u32> = (&mut stream).map(|t| t.unwrap().id).collect();
                let (rounds, proposed, accepted) = stream.draft_counters();
                assert_eq!(ids, plain, "{name}, schema {i}, n-gram drafter {drafted}");
                assert!(rounds > 0 && proposed > 0 && accepted > 0, "{name}, schema {i}: forced runs drafted ({rounds}, {proposed}, {accepted})");
            }
        }
    }
}

/// A verify whose drafts leave the grammar: drafts up to the first one the grammar refuses may
/// be accepted, never that one; the next token is one the grammar allows; the session then
/// holds what stepping the accepted tokens would, constraint included.
#[test]
fn verify_never_accepts_a_draft_the_grammar_refuses() {
    let m = Model::open(tiny("llama")).unwrap();
    let prompt = m.tokenize("Hello", true, false).unwrap();
    let mut probe = Constraint::new(&m, GrammarKind::Regex, "[a-z]{3,6}").unwrap();
    // An allowed pending token and draft, then one the grammar refuses.
    let n = m.info().n_vocab;
    let mut ok = Vec::new();
    for _ in 0..3 {
        let mut l = vec![0.0f32; n];
        probe.mask(&mut l).unwrap();
        let t = l.iter().position(|&x| x == 0.0).unwrap() as u32;
        probe.accept(t).unwrap();
        ok.push(t);
    }
    let mut l = vec![0.0f32; n];
    probe.mask(&mut l).unwrap();
    let refused = l.iter().position(|&x| x == f32::NEG_INFINITY).unwrap() as u32;
    let c = Constraint::new(&m, GrammarKind::Regex, "[a-z]{3,6}").unwrap();
    for acceptance in [0u8, 1] {
        let mut s = m.session().unwrap();
        s.step_batch(&prompt, Want::Last).unwrap();
        s.set_constraint(Some(c.clone())).unwrap();
        let (params, mut rng) = (SamplerParams { temperature: 1.0, ..Default::default() }, 7u64);
        let mut rng2 = rng;
        let acc = if acceptance == 0 { Acceptance::Greedy } else { Acceptance::Sampled { params: &params, draft_probs: None, rng: &mut rng } };
        let draft = [ok[1], ok[2], refused, ok[0]];
        // The same verify in a shared pass, beside another session's step.
        let mut twin = s.fork();
        let mut other = m.session().unwrap();
        let acc2 = if acceptance == 0 { Acceptance::Greedy } else { Acceptance::Sampled { params: &params, draft_probs: None, rng: &mut rng2 } };
        let shared = packlm::Session::run_many(&mut [(&mut other, packlm::Job::Step { tokens: &prompt, want: Want::Last }), (&mut twin, packlm::Job::Verify { pending: ok[0], draft: &draft, acceptance: acc2 })]).unwrap();
        let r = s.verify(ok[0], &draft, acc).unwrap();
        assert_eq!(format!("{:?}", shared[1]), format!("{:?}", packlm::JobResult::Verified(r.clone())), "a verify under a constraint in a shared pass");
        assert_bits_equal(twin.last_logits(), s.last_logits(), "the last logits of a shared verify under a constraint");
        assert!(r.n_accepted <= 2, "a refused draft was accepted: {r:?}");
        let mut check = Constraint::new(&m, GrammarKind::Regex, "[a-z]{3,6}").unwrap();
        for &t in [ok[0]].iter().chain(&draft[..r.n_accepted]) {
            check.accept(t).unwrap();
        }
        assert!(check.allows(r.next).unwrap(), "the next token {} is not allowed", r.next);
        // The session's constraint took the same tokens: its last logits are masked as the
        // checking constraint masks them.
        let mut want = s.last_logits().to_vec();
        check.mask(&mut want).unwrap();
        assert_bits_equal(s.last_logits(), &want, "the last logits after verify");
        assert!(s.step(refused).is_err() || check.allows(refused).unwrap());
    }
}

/// Truncate rolls the constraint back with the session; fork copies it; restore is refused
/// while one is set; step_many refuses a session holding one; misuse changes nothing.
#[test]
fn the_constraint_follows_the_session() {
    let m = Model::open(tiny("llama")).unwrap();
    let prompt = m.tokenize("Hello", true, false).unwrap();
    let c = Constraint::new(&m, GrammarKind::Regex, "[a-z]{2,8}").unwrap();
    let mut s = m.session().unwrap();
    s.step_batch(&prompt, Want::Last).unwrap();
    s.set_constraint(Some(c)).unwrap();
    let mut rows = Vec::new();
    let mut toks = Vec::new();
    for _ in 0..3 {
        let t = packlm::argmax(s.last_logits());
        toks.push(t);
        rows.push(s.step(t).unwrap());
    }
    let snap = s.snapshot();
    let mut f = s.fork();
    s.truncate(prompt.len() + 1).unwrap();
    assert_bits_equal(&s.step(toks[1]).unwrap(), &rows[1], "a step after truncate, masked as before");
    // Back to where it was set: the constraint is back at its start.
    s.truncate(prompt.len()).unwrap();
    assert_bits_equal(&s.step(toks[0]).unwrap(), &rows[0], "a step after truncating to where it was set");
    f.truncate(prompt.len() + 2).unwrap();
    assert_bits_equal(&f.step(toks[2]).unwrap(), &rows[2], "a fork's constraint");
    let e = s.restore(&snap).unwrap_err();
    assert!(e.status == Status::ErrInvalidArgument && e.message.contains("constraint"), "{e}");
    let mut other = m.session().unwrap();
    // In a shared pass: a token the constraint refuses refuses the call, naming the item, and
    // nothing changes; allowed tokens give the rows of stepping alone.
    let before = f.snapshot();
    let refused = (0..m.info().n_vocab as u32).find(|&t| rows[2][t as usize] == f32::NEG_INFINITY).unwrap();
    let mut f2 = f.fork();
    f2.truncate(prompt.len() + 2).unwrap();
    let e = packlm::Session::step_many(&mut [packlm::StepItem { session: &mut other, tokens: &prompt, want: Want::Last }, packlm::StepItem { session: &mut f2, tokens: &[refused], want: Want::Last }]).unwrap_err();
    assert!(e.status == Status::ErrInvalidArgument && e.message.starts_with("item 1"), "{e}");
    assert_eq!(other.n_past(), 0);
    let got = packlm::Session::step_many(&mut [packlm::StepItem { session: &mut other, tokens: &prompt, want: Want::Last }, packlm::StepItem { session: &mut f2, tokens: &[toks[2]], want: Want::All }]).unwrap();
    assert_bits_equal(&got[1], &rows[2], "a constrained session in a shared pass");
    assert!(f.snapshot() == before);
    // With the constraint cleared, restore works and the rows are the unmasked ones.
    s.set_constraint(None).unwrap();
    s.restore(&snap).unwrap();
    // A constraint of another model is refused.
    let g = Model::open(tiny("gemma3")).unwrap();
    let cg = Constraint::new(&g, GrammarKind::Regex, "[a-z]+").unwrap();
    assert!(other.set_constraint(Some(cg)).is_err());
}

#[test]
fn bad_grammars_are_refused_with_their_reason() {
    let m = Model::open(tiny("llama")).unwrap();
    for (kind, text, want) in [
        (GrammarKind::JsonSchema, "{\"type\": \"object\"", "not JSON"),
        (GrammarKind::JsonSchema, "{\"type\": \"objekt\"}", "objekt"),
        (GrammarKind::Regex, "([", "regex"),
        (GrammarKind::Lark, "start: foo", "foo"),
        (GrammarKind::Gbnf, "root ::= item\nitem ::= \"a\" bar\n", "\"bar\" is used but never defined"),
        (GrammarKind::Gbnf, "root ::= \"a\"\nitem ::= \"b\" )\n", "line 2"),
        (GrammarKind::Regex, "a\0b", "NUL"),
    ] {
        let e = Constraint::new(&m, kind, text).unwrap_err();
        assert_eq!(e.status, Status::ErrInvalidArgument, "{text:?}: {e}");
        assert!(e.message.contains(want), "{text:?}: {e}");
    }
    // Deeply nested grammars are refused, not a stack overflow, and the message stays short.
    let deep_re = format!("{}a{}", "(".repeat(50_000), ")".repeat(50_000));
    let deep_lark = format!("start: {}\"a\"{}", "(".repeat(20_000), ")".repeat(20_000));
    let mut deep_json = String::from("{\"type\": \"string\"}");
    for _ in 0..5000 {
        deep_json = format!("{{\"type\": \"array\", \"items\": {deep_json}}}");
    }
    for (kind, text) in [(GrammarKind::Regex, deep_re), (GrammarKind::Lark, deep_lark), (GrammarKind::JsonSchema, deep_json)] {
        let e = Constraint::new(&m, kind, &text).unwrap_err();
        assert_eq!(e.status, Status::ErrInvalidArgument, "{kind:?}");
        assert!(e.message.len() < 1200, "{kind:?}: a message of {} bytes", e.message.len());
    }
    let big = "a".repeat(packlm::MAX_GRAMMAR_BYTES + 1);
    assert_eq!(Constraint::new(&m, GrammarKind::Regex, &big).unwrap_err().status, Status::ErrLimitExceeded);
}

/// Once the grammar has ended only stop tokens are allowed, and one is taken (several, even);
/// rolling them back gives the ended state's mask again, and rolling back past them the
/// grammar's own state.
#[test]
fn stop_tokens_after_the_end_are_taken_and_rolled_back() {
    let m = Model::open(tiny("llama")).unwrap();
    let n = m.info().n_vocab;
    let stop = m.info().stop_tokens[0];
    let mut c = Constraint::new(&m, GrammarKind::Regex, "[a-z]{1,2}").unwrap();
    let mask = |c: &mut Constraint| {
        let mut l = vec![0.0f32; n];
        c.mask(&mut l).unwrap();
        l
    };
    let mut masks = vec![mask(&mut c)];
    while !c.is_finished() {
        let l = masks.last().unwrap();
        let t = (0..n as u32).filter(|&t| l[t as usize] == 0.0 && t != stop).min_by_key(|&t| m.token_bytes(t, false).unwrap().len()).unwrap();
        c.accept(t).unwrap();
        masks.push(mask(&mut c));
        assert!(masks.len() < 4, "a match of at most 2 letters ended");
    }
    let ended = masks.last().unwrap().clone();
    assert!(ended.iter().enumerate().all(|(t, &l)| (l == 0.0) == m.is_stop(t as u32)), "once ended only stop tokens are allowed");
    c.accept(stop).unwrap();
    c.accept(stop).unwrap();
    assert!(c.is_finished());
    assert!(c.accept(5).is_err(), "a token after the end");
    c.rollback(2).unwrap();
    assert_bits_equal(&mask(&mut c), &ended, "the ended state again");
    c.rollback(1).unwrap();
    assert_bits_equal(&mask(&mut c), &masks[masks.len() - 2], "the state before the last letter");
}

/// llguidance's own `Matcher`, run directly over a token table built here from the model's
/// public vocabulary calls (raw token bytes; control tokens marked 0xFF + text; the stop tokens
/// as the EOS set; text tokenized by the model's tokenizer), against `Constraint` on the same tokens: the same mask at every step, on
/// every kind (a GBNF grammar's Matcher runs on the Lark text it translates to).
#[test]
fn masks_agree_with_llguidances_matcher() {
    use llguidance::api::TopLevelGrammar;
    use llguidance::{Matcher, ParserFactory};
    use toktrie::{TokEnv, TokRxInfo, TokTrie};
    for (name, m) in models() {
        let n = m.info().n_vocab;
        let stop = m.info().stop_tokens.clone();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|t| match m.token_kind(t) {
                Some(packlm::TokenKind::Control) => [vec![TokTrie::SPECIAL_TOKEN_MARKER], m.token_text(t).unwrap_or_default().into_bytes()].concat(),
                _ => m.token_bytes(t, false).unwrap(),
            })
            .collect();
        let mut info = TokRxInfo::new(n as u32, stop[0]);
        info.tok_bos = m.info().bos;
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&stop);
        // Text llguidance tokenizes (the forced runs; what the mask allows in front of them
        // depends on it) goes through the model's tokenizer, as a caller's would.
        struct Env(TokTrie, Model);
        impl toktrie::TokenizerEnv for Env {
            fn tok_trie(&self) -> &TokTrie {
                &self.0
            }
            fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
                match std::str::from_utf8(s) {
                    Ok(text) => self.1.tokenize(text, false, false).unwrap(),
                    Err(_) => self.0.greedy_tokenize(s),
                }
            }
        }
        let env: TokEnv = std::sync::Arc::new(Env(trie, m.clone()));
        let mut factory = ParserFactory::new_simple(&env).unwrap();
        factory.quiet();
        let gbnf = "root ::= \"{\" pair (\", \" pair)* \"}\"\npair ::= [a-z]{1,4} \": \" [0-9]{1,3}\n";
        let schema = r#"{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99},"b":{"enum":["x","yz"]}},"required":["a","b"],"x-guidance":{"whitespace_flexible":false,"item_separator":", ","key_separator":": "}}"#;
        let lark = "start: \"say \" WORD (\" \" WORD)*\nWORD: /[a-z]{1,5}/\n";
        for (kind, text, grammar) in [
            (GrammarKind::Regex, "[a-c]{1,3}(x|yz)", TopLevelGrammar::from_regex("[a-c]{1,3}(x|yz)")),
            (GrammarKind::Lark, lark, TopLevelGrammar::from_lark(lark.to_string())),
            (GrammarKind::JsonSchema, schema, TopLevelGrammar::from_json_schema(serde_json::from_str(schema).unwrap())),
            (GrammarKind::Gbnf, gbnf, TopLevelGrammar::from_lark(packlm::constrain::gbnf::to_lark(gbnf, "root", &|_| None).unwrap())),
        ] {
            let mut ours = Constraint::new(&m, kind, text).unwrap();
            let mut theirs = Matcher::new(factory.create_parser(grammar));
            // Take the allowed token with the most bytes (then the lowest id), a path through
            // the grammar that both must agree on, until the end.
            for step in 0..40 {
                let mut row = vec![0.0f32; n];
                ours.mask(&mut row).unwrap();
                let vob = theirs.compute_mask_or_eos().unwrap();
                for t in 0..n {
                    assert_eq!(row[t] == 0.0, vob.is_allowed(t as u32), "{name}, {kind:?}, step {step}, token {t} ({:?})", String::from_utf8_lossy(&words[t]));
                }
                let t = (0..n as u32).filter(|&t| row[t as usize] == 0.0).max_by_key(|&t| (words[t as usize].len(), std::cmp::Reverse(t))).unwrap();
                ours.accept(t).unwrap();
                if stop.contains(&t) && theirs.is_stopped() {
                    break;
                }
                theirs.consume_token(t).unwrap();
                if stop.contains(&t) {
                    assert!(ours.is_finished() && theirs.is_stopped(), "{name}, {kind:?}: a stop token ends both");
                    break;
                }
            }
        }
    }
}

/// The sample grammars that ship with llama.cpp (read from the llama-cpp-python 0.3.36 sdist
/// that tests/llama/fetch.sh caches, never copied here) are accepted as GBNF, and on each model
/// their replies at temperature 0 and at temperature 1 with 3 seeds parse by the grammar: by a
/// recognizer written from the GBNF rules (tests/common/gbnf.rs), the whole reply where a stop
/// token ended it, a prefix of a sentence of the grammar where the token limit did. Some
/// replies end.
#[test]
fn llama_cpp_sample_grammars_give_replies_that_parse() {
    let Some(dir) = common::gbnf::samples() else { return };
    let files = ["json.gbnf", "json_arr.gbnf", "list.gbnf", "arithmetic.gbnf", "c.gbnf", "chess.gbnf", "english.gbnf", "japanese.gbnf"];
    let mut ended = 0;
    for (name, m) in models() {
        let prompt = m.tokenize("Write one short example.\n", true, false).unwrap();
        for file in files {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            let oracle = common::gbnf::Gbnf::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            let c = Constraint::new(&m, GrammarKind::Gbnf, &text).unwrap_or_else(|e| panic!("{name}, {file}: {e}"));
            for (temp, seed) in [(0.0, 0), (1.0, 1), (1.0, 2), (1.0, 3)] {
                let mut s = m.session().unwrap();
                let options = GenerateOptions { max_tokens: 48, sampler: SamplerParams { temperature: temp, ..Default::default() }, seed, constraint: Some(c.clone()), ..Default::default() };
                let ids: Vec<u32> = s.generate(&prompt, options).map(|t| t.unwrap().id).collect();
                let n = ids.len();
                // The reply's bytes; where the token limit cut a character, the whole
                // characters before the cut.
                let bytes: Vec<u8> = ids.iter().filter(|&&t| !m.is_stop(t)).flat_map(|&t| m.token_bytes(t, false).unwrap()).collect();
                let reply = match std::str::from_utf8(&bytes) {
                    Ok(r) => r.to_string(),
                    Err(e) if n == 48 && e.error_len().is_none() => String::from_utf8(bytes[..e.valid_up_to()].to_vec()).unwrap(),
                    Err(e) => panic!("{name}, {file}: the reply is not UTF-8: {e}"),
                };
                let what = format!("{name}, {file}, temperature {temp}, seed {seed}: {reply:?}");
                if n < 48 {
                    ended += 1;
                    assert!(oracle.accepts(&reply), "{what}: ended, but is not a sentence of the grammar");
                } else {
                    assert!(oracle.accepts_prefix(&reply), "{what}: not a prefix of a sentence of the grammar");
                }
            }
        }
    }
    assert!(ended > 0, "no reply ended: the whole-sentence check never ran");
}
