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

/// `batch` with a huge count is refused before minijinja reserves a row of that many values
/// (10^9: 24 GB, which aborted the fuzzer with out-of-memory); a small one renders.
#[test]
fn a_batch_of_a_huge_count_is_refused() {
    let e = render("{{ range(10)|batch(1000000003)|list }}", &chat(1), true, "<s>", "</s>").unwrap_err();
    assert_eq!(e.status, Status::ErrLimitExceeded, "{e}");
    assert_eq!(render("{{ range(5)|batch(2)|list|length }}", &chat(1), true, "<s>", "</s>").unwrap(), "3");
}

/// Backward slices that minijinja 2.24 cannot take itself (an empty value, a stop past the
/// start, the smallest step) render as Jinja2 renders them (Python's slices: empty, empty, the
/// last element); the others as before. `""[::-1]` panicked inside minijinja (a fuzzer's find).
#[test]
fn backward_slices_of_every_kind_render() {
    let empty = [Message { role: "user".into(), content: String::new() }];
    let r = |t: &str, chat: &[Message]| render(t, chat, true, "<s>", "</s>").unwrap();
    assert_eq!(r("[{{ messages[0].content[::-1] }}]", &empty), "[]");
    assert_eq!(r("[{{ ''[::-2] }}|{{ [][::-1]|length }}]", &empty), "[|0]");
    assert_eq!(r("[{{ 'abc'[1:2:-1] }}|{{ [1, 2, 3][0:5:-1]|length }}]", &chat(1)), "[|0]");
    assert_eq!(r("{{ 'abc'[::-9223372036854775807 - 1] }}", &chat(1)), "c");
    assert_eq!(r("{{ 'abc'[::-1] }} {{ 'abcdef'[4:1:-2] }} {{ [1, 2, 3][::-1] }}", &chat(1)), "cba ec [3, 2, 1]");
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

/// Constructs real templates use (namespaces, macros with `caller`, slices, `loop.changed` and
/// `loop.cycle`, filter chains, string methods, `format`, set and filter blocks, `tojson`,
/// `indent`), each passing through the render's guards, give what Jinja2 3.1.6 gives for the same
/// template and chat (the expected text was rendered by Jinja2, `jinja2.Environment()` defaults).
#[test]
fn common_constructs_render_as_jinja2_does() {
    let template = r#"{%- set ns = namespace(first=true, count=0, sys='') -%}
{%- macro turn(role) -%}<{{ role }}>{{ caller() }}</{{ role }}>{%- endmacro -%}
{%- if messages[0].role == 'system' %}{% set ns.sys = messages[0].content.strip() %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif -%}
[{{ ns.sys|upper }}]
{% for m in rest -%}
{%- set ns.count = ns.count + 1 -%}
{%- if loop.changed(m.role) %}{{ loop.cycle('*', '+') }}{% endif -%}
{% call turn(m.role) %}{{ m.content|trim|replace('  ', ' ') }}{% endcall %}
{%- if not loop.last %} | {% endif -%}
{% endfor %}
{{ ns.count }} turns; users: {{ rest|selectattr('role', 'equalto', 'user')|map(attribute='content')|map('length')|join(',') }}
{%- set words = rest[-1].content.split() %}
last words: {{ words|length }} {{ words[0]|tojson }} {{ '%s-%d'|format(words[-1], words|length) }} {{ '{}/{}'.format(loop_free|default('none'), 2) }}
{{ (rest|map(attribute='role')|list + ['end'])|length }} {{ ('ab' * 3)[1:4] }} {{ [1, 2] + [3] }} {{ range(4)|sum }} {{ range(5)|batch(2)|list|length }}
{%- set block %}{% for k, v in dict(b=2).items() %}{{ k }}={{ v }}{% endfor %}{% endset %}
{% filter upper %}block {{ block }}{% endfilter %} {{ 'x' in 'xyz' }} {{ rest[::-1][0].role }}
{{ rest[0].content|indent(2) }}
{% if add_generation_prompt %}{{ bos_token ~ 'go' ~ eos_token }}{% endif %}
"#;
    let m = |role: &str, content: &str| Message { role: role.into(), content: content.into() };
    let chat = [m("system", "  Be brief. "), m("user", "Hi  there\nsecond line"), m("assistant", "Hello!"), m("user", "What is  2+2 ? answer now")];
    let want = "[BE BRIEF.]\n*<user>Hi there\nsecond line</user> | +<assistant>Hello!</assistant> | *<user>What is 2+2 ? answer now</user>\n3 turns; users: 21,25\nlast words: 6 \"What\" now-6 none/2\n4 bab [1, 2, 3] 6 3\nBLOCK B=2 True user\nHi  there\n  second line\n<s>go</s>";
    assert_eq!(render(template, &chat, true, "<s>", "</s>").unwrap(), want);
}
