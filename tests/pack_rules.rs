//! Pack-opening rules: sharded safetensors, BOS handling, and refusals that name the key.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::*;
use packlm::engine::{Model, OpenOptions};
use packlm::Status;
use safetensors::tensor::{serialize_to_file, TensorView};
use safetensors::SafeTensors;

/// A copy of a fixture folder in a fresh temporary folder.
fn copy_fixture(name: &str, tag: &str) -> PathBuf {
    let dir = tiny(name);
    let tmp = std::env::temp_dir().join(format!("packlm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, tmp.join(p.file_name().unwrap())).unwrap();
    }
    tmp
}

fn open_err(path: &Path) -> packlm::Error {
    match Model::open(path, &OpenOptions::default()) {
        Ok(_) => panic!("{} opened but should have been refused", path.display()),
        Err(e) => e,
    }
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut c);
    std::fs::write(&p, c.to_string()).unwrap();
}

#[test]
fn sharded_safetensors_give_the_same_logits() {
    let dir = copy_fixture("llama", "shards");
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    let (a, b) = names.split_at(names.len() / 2);
    let mut weight_map = serde_json::Map::new();
    for (file, part) in [("model-00001-of-00002.safetensors", a), ("model-00002-of-00002.safetensors", b)] {
        let views: Vec<(String, TensorView)> = part
            .iter()
            .map(|n| {
                let t = st.tensor(n).unwrap();
                weight_map.insert(n.clone(), serde_json::json!(file));
                (n.clone(), TensorView::new(t.dtype(), t.shape().to_vec(), t.data()).unwrap())
            })
            .collect();
        serialize_to_file(views, None::<HashMap<String, String>>, &dir.join(file)).unwrap();
    }
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let g = golden(&tiny("llama"));
    let want = all_rows(&open(&tiny("llama")), &g.tokens);
    let got = all_rows(&open(&dir), &g.tokens);
    assert_bits_equal(&got, &want, "sharded vs single file");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bos_is_added_once() {
    let m = open(&tiny("llama"));
    assert_eq!(m.vocab().bos, Some(0));
    let plain = m.vocab().encode("Hello", true, true).unwrap();
    assert_eq!(plain[0], 0);
    assert_ne!(plain[1], 0);
    // Text that already starts with "<s>" (parsed as special) gets no second BOS.
    let already = m.vocab().encode("<s>Hello", true, true).unwrap();
    assert_eq!(already, plain);
    // Without special parsing, "<s>" is text, so BOS is added before it.
    let literal = m.vocab().encode("<s>Hello", true, false).unwrap();
    assert_eq!(literal[0], 0);
    assert_ne!(literal[1], 0);
}

#[test]
fn unknown_rope_type_is_refused_naming_the_key() {
    let dir = copy_fixture("llama", "rope");
    edit_config(&dir, |c| c["rope_parameters"]["rope_type"] = serde_json::json!("longrope"));
    let e = open_err(&dir);
    assert_eq!(e.status, Status::ErrUnsupported);
    assert!(e.message.contains("rope_parameters") && e.message.contains("longrope"), "{}", e.message);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unknown_architecture_and_activation_are_refused() {
    let dir = copy_fixture("llama", "arch");
    edit_config(&dir, |c| c["model_type"] = serde_json::json!("mamba"));
    let e = open_err(&dir);
    assert_eq!(e.status, Status::ErrUnsupported);
    assert!(e.message.contains("model_type") && e.message.contains("mamba"), "{}", e.message);
    edit_config(&dir, |c| {
        c["model_type"] = serde_json::json!("llama");
        c["hidden_act"] = serde_json::json!("relu");
    });
    let e = open_err(&dir);
    assert!(e.message.contains("hidden_act"), "{}", e.message);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn wrong_tensor_shape_is_refused_naming_the_tensor() {
    let dir = copy_fixture("llama", "shape");
    edit_config(&dir, |c| c["intermediate_size"] = serde_json::json!(100));
    let e = open_err(&dir);
    assert_eq!(e.status, Status::ErrTensor);
    assert!(e.message.contains("mlp.gate_proj.weight"), "{}", e.message);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_key_is_named() {
    let dir = copy_fixture("llama", "missing");
    edit_config(&dir, |c| {
        c.as_object_mut().unwrap().remove("num_hidden_layers");
    });
    let e = open_err(&dir);
    assert_eq!(e.status, Status::ErrFormat);
    assert!(e.message.contains("num_hidden_layers"), "{}", e.message);
    std::fs::remove_dir_all(&dir).ok();
}

/// The layer table the CLI prints: literal values, not recomputed from the config.
#[test]
fn info_lists_each_layer() {
    let m = open(&tiny("mistral"));
    let info = packlm::engine::info_json(&m);
    let layers = info["layers"].as_array().unwrap();
    assert_eq!(layers.len(), m.spec().layers.len());
    for l in layers {
        assert_eq!(l["attention"], "sliding");
        assert_eq!(l["window"], 5);
        assert_eq!(l["n_heads"], 4);
        assert_eq!(l["n_kv_heads"], 2);
        assert_eq!(l["kv_width"], 32);
    }
    let q3 = open(&tiny("qwen3"));
    let l0 = &packlm::engine::info_json(&q3)["layers"][0];
    assert_eq!(l0["head_dim"], 32);
    assert_eq!(l0["qk_norm"], true);
    assert_eq!(l0["attention"], "full");
}
