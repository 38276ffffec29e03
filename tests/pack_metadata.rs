//! The metadata a pack reports (`Model::metadata`, what libllama's `llama_model_meta_*` give a
//! llama.cpp client): for an HF folder, the architecture, sizes and chat template under GGUF's
//! key names. The expected values are the fixtures' config.json and tokenizer_config.json.

use std::path::{Path, PathBuf};

use packlm::engine::{Model, OpenOptions};

fn fixture(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(dir)
}

fn meta_of(path: &Path) -> Vec<(String, String)> {
    let model = Model::open(path, &OpenOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    model.metadata().to_vec()
}

fn meta(dir: &str) -> Vec<(String, String)> {
    meta_of(&fixture(dir))
}

fn get<'a>(meta: &'a [(String, String)], key: &str) -> Option<&'a str> {
    meta.iter().find(|kv| kv.0 == key).map(|kv| kv.1.as_str())
}

#[test]
fn llama_folder_states_architecture_and_sizes() {
    let m = meta("llama");
    // config.json: model_type llama, 2 layers, hidden 64, max_position_embeddings 128.
    assert_eq!(get(&m, "general.architecture"), Some("llama"));
    assert_eq!(get(&m, "llama.block_count"), Some("2"));
    assert_eq!(get(&m, "llama.embedding_length"), Some("64"));
    assert_eq!(get(&m, "llama.context_length"), Some("128"));
}

#[test]
fn gemma3_folder_names_its_architecture_as_gguf_does_and_carries_its_template() {
    // config.json: model_type gemma3_text; GGUF files name the architecture "gemma3".
    let m = meta("gemma3");
    assert_eq!(get(&m, "general.architecture"), Some("gemma3"));
    assert_eq!(get(&m, "gemma3.context_length"), Some("128"));
    assert_eq!(get(&m, "tokenizer.chat_template"), None, "the fixture has no template");

    // The same folder with a chat_template.jinja: the template is reported as written.
    let dir = std::env::temp_dir().join(format!("packlm-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture("gemma3")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let template = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}";
    std::fs::write(dir.join("chat_template.jinja"), template).unwrap();
    let m = meta_of(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(get(&m, "tokenizer.chat_template"), Some(template));
}
