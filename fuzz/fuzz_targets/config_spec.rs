//! config.json of arbitrary bytes -> ModelSpec (one LayerSpec per layer), for both containers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packlm::semantics::{Container, ModelSpec};

fuzz_target!(|data: &[u8]| {
    let Ok(config) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    for container in [Container::Folder, Container::Gguf] {
        if let Ok(spec) = ModelSpec::from_config(&config, "fuzz", container) {
            assert!(!spec.layers.is_empty());
            for l in &spec.layers {
                assert!(l.attn_scale.is_finite(), "attention scale {}", l.attn_scale);
                assert!(l.rope.inv_freq.iter().all(|f| f.is_finite()), "rope {:?}", l.rope);
                assert!(l.rope.attention_factor.is_finite());
            }
            assert!(spec.norm_eps.is_finite() && spec.norm_eps >= 0.0);
            let _ = spec.layers_json();
        }
    }
});
