//! The memory bound of chat templates: every template of a hostile corpus (filters, methods and
//! operators that build one huge value, values that double in a loop, values nested or chained
//! without end, constant expressions folded at compile time) is rendered by a child process
//! under a 4 GiB address-space limit, and must end with a clean refusal (the status, and a
//! message naming the filter or limit) and a peak resident size, above the child's size before
//! the render, under the stated bound: twice the render's allocation budget (a string is built,
//! then copied once into minijinja's shared form) plus [`SLACK`].
//!
//! Linux only (`ulimit -v`, and /proc/self/clear_refs to reset the peak).
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use packlm::pack::chat::{render, Limits, Message};
use packlm::Status;

/// Address-space limit of each child (KiB for `ulimit -v`): 4 GiB.
const AS_LIMIT_KIB: u64 = 4 * 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(60);
/// What a render may hold besides its budget: the template's instructions, the VM's stack and
/// frames, the allocator's own overhead.
const SLACK: usize = 16 << 20;

const LIMIT: Status = Status::ErrLimitExceeded;
const UNSUPPORTED: Status = Status::ErrUnsupported;

/// (name, template, status, a word the message must hold).
const CORPUS: &[(&str, &str, Status, &str)] = &[
    // One step that builds one huge value.
    ("indent_width", "{{ 'a\nb'|indent(100000000000) }}", LIMIT, "`indent`"),
    ("indent_width_kwarg", "{{ messages[0].content|indent(width=100000000000, first=true) }}", LIMIT, "`indent`"),
    ("tojson_indent", "{{ messages|tojson(indent=100000000000) }}", LIMIT, "`tojson`"),
    ("format_width", "{{ '%100000000000s'|format('x') }}", LIMIT, "`format`"),
    ("format_precision", "{{ '%.100000000000f'|format(1.5) }}", LIMIT, "`format`"),
    ("str_format_width", "{{ '{:>100000000000}'.format('x') }}", LIMIT, "`.format()`"),
    // Rust's formatting, which minijinja formats numbers with, panics past a precision of 65535.
    ("format_precision_past_fmt", "{{ '%.100000f'|format(1.5) }}", LIMIT, "65535"),
    ("str_format_precision_past_fmt", "{{ '{:.100000e}'.format(1.5) }}", LIMIT, "65535"),
    ("replace_longer", "{% set s = messages[0].content * 100000 %}{{ s|replace('h', 'x' * 10000) }}", LIMIT, "`replace`"),
    ("replace_method_empty", "{% set s = messages[0].content * 100000 %}{{ s.replace('', 'x' * 1000) }}", LIMIT, "`.replace()`"),
    ("join_repeated", "{% set l = range(100000)|list %}{{ (l * 100000)|join(',') }}", LIMIT, "`*`"),
    ("sort_repeated", "{% set l = range(100000)|list %}{{ (l * 100000)|sort }}", LIMIT, "`*`"),
    ("list_of_long_string", "{% set s = messages[0].content * 1000000 %}{{ s|list|length }}", LIMIT, "`list`"),
    ("split_many", "{% set s = ' ' * 8000000 %}{{ s.split(' ')|length }}", LIMIT, "`.split()`"),
    ("batch_fill", "{{ range(10)|batch(100000000000, 'x')|list }}", LIMIT, "`batch`"),
    ("slice_count", "{{ range(10)|slice(100000000000)|list }}", LIMIT, "`slice`"),
    // A control character prints as six bytes in debug form.
    ("pprint_wide", "{% set l = ['\\x01' * 100000] * 40 %}{{ l|pprint }}", LIMIT, "`pprint`"),
    // Values that double in a loop.
    ("doubling_concat", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", LIMIT, "`~`"),
    ("doubling_add", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}", LIMIT, "`+`"),
    ("doubling_list", "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}", LIMIT, "`+`"),
    ("doubling_repeat", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] * 2 %}{% endfor %}{{ ns.l }}", LIMIT, "tree"),
        ("doubling_tree", "{% set ns = namespace(s=[1]) %}{% for i in range(60) %}{% set ns.s = [ns.s, ns.s] %}{% endfor %}{{ ns.s }}", LIMIT, "tree"),
    ("doubling_macro", "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ d('x', 40) }}", LIMIT, "`~`"),
    ("growing_list", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l|length }}", LIMIT, "`+`"),
    // Printing or capturing without end.
    ("capture_loop", "{% set x %}{% for i in range(100000) %}{% for j in range(100) %}0123456789{% endfor %}{% endfor %}{% endset %}{{ x|length }}", LIMIT, "output"),
    ("macro_capture", "{% macro m() %}{% for i in range(100000) %}{{ messages[0].content * 1000 }}{% endfor %}{% endmacro %}{% set x = m() %}{{ x|length }}", LIMIT, "output"),
    // Values nested or chained without end (printing, comparing or dropping them recurses).
    ("nested_lists", "{% set ns = namespace(l=none) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}", LIMIT, "levels"),
    ("nested_repeat", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] * 1 %}{% endfor %}{{ ns.l }}", LIMIT, "levels"),
    ("nested_maps", "{% set ns = namespace(m={}) %}{% for i in range(100000) %}{% set ns.m = {'a': ns.m} %}{% endfor %}{{ ns.m == ns.m }}", LIMIT, "levels"),
    ("namespace_cycle", "{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}", UNSUPPORTED, "namespace"),
    ("namespace_chain", "{% set ns = namespace(l=none) %}{% for i in range(100000) %}{% set ns.l = namespace(x=ns.l) %}{% endfor %}x", UNSUPPORTED, "namespace"),
    ("namespace_in_list", "{% set ns = namespace() %}{% set l = [ns] %}{% set ns.x = l %}{{ l }}", UNSUPPORTED, "namespace"),
    ("loop_chain", "{% set ns = namespace(l=none) %}{% for i in range(100000) %}{% for x in [ns.l] %}{% set ns.l = loop %}{% endfor %}{% endfor %}x", UNSUPPORTED, "loop"),
    ("loop_changed_chain", "{% set ns = namespace(l=none) %}{% for i in range(100000) %}{% for x in [1] %}{{ loop.changed(ns.l) }}{% set ns.l = loop %}{% endfor %}{% endfor %}x", UNSUPPORTED, "loop"),
    // Constant expressions, folded by the compiler before any step runs.
    ("folded_repeat", "{{ ('x' * 100000000 ~ 'x' * 100000000) ~ ('x' * 100000000 ~ 'x' * 100000000) }}", LIMIT, "constant expression"),
    ("folded_lazy_list", "{{ ([1] * 1000000000000) ~ '' }}", LIMIT, "constant expression"),
    ("folded_filter_input", "{{ ('x' * 100000000)|replace('x', 'yy') }}", LIMIT, "constant expression"),
    // The operands of an operation that then fails are folded all the same.
    ("folded_failing_op", "{{ ('x' * 100000000) - 0 }}", LIMIT, "constant expression"),
];

fn vm_kib(key: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn chat() -> Vec<Message> {
    vec![Message { role: "user".into(), content: "hello".into() }]
}

/// In the child: renders case `i`, prints its status, message, peak and budget.
fn child(i: usize) {
    let (_, template, _, _) = CORPUS[i];
    let msgs = chat();
    // Writing 5 to clear_refs resets the peak to the current resident size (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let base = vm_kib("VmRSS:");
    let result = render(template, &msgs, true, "<s>", "</s>");
    let peak = vm_kib("VmHWM:").saturating_sub(base) * 1024;
    let (status, message) = match result {
        Ok(text) => (Status::Ok, format!("rendered {} bytes", text.len())),
        Err(e) => (e.status, e.message.replace('\n', " ")),
    };
    // On a line of its own: the test harness has printed the test name before it.
    println!("\nRESULT {} {peak} {}", status as i32, message);
}

#[test]
fn hostile_templates_are_refused_within_the_memory_bound() {
    if let Ok(i) = std::env::var("PACKLM_CHAT_MEMORY_CASE") {
        child(i.parse().unwrap());
        return;
    }
    let budget = Limits::for_chat(&chat()).alloc_budget;
    let bound = 2 * budget + SLACK;
    let mut failures = Vec::new();
    for (i, &(name, _, want, needle)) in CORPUS.iter().enumerate() {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {AS_LIMIT_KIB} && exec \"$@\""))
            .arg("sh")
            .arg(std::env::current_exe().unwrap())
            .args(["hostile_templates_are_refused_within_the_memory_bound", "--exact", "--nocapture", "--test-threads=1"])
            .env("PACKLM_CHAT_MEMORY_CASE", i.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let Some(status) = status else {
            failures.push(format!("{name}: no exit within {TIMEOUT:?}"));
            continue;
        };
        let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
            let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            failures.push(format!("{name}: the child ended without a result ({status}): {tail}"));
            continue;
        };
        let mut parts = line.splitn(3, ' ');
        let got: i32 = parts.next().unwrap().parse().unwrap();
        let peak: usize = parts.next().unwrap().parse().unwrap();
        let message = parts.next().unwrap_or("");
        eprintln!("{name}: status {got}, peak {:.1} MiB: {message}", peak as f64 / (1 << 20) as f64);
        if got != want as i32 || !message.contains(needle) {
            failures.push(format!("{name}: wanted status {} naming {needle:?}, got {got}: {message}", want as i32));
        }
        if peak > bound {
            failures.push(format!("{name}: peak {peak} bytes above the bound of {bound} (2 x the budget of {budget} + {SLACK})"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), CORPUS.len(), failures.join("\n"));
}
