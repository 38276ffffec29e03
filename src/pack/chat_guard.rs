//! The allocation budget of a chat-template render (see the module doc of `chat.rs` for why it
//! is done this way): the template's compiled instructions are rewritten so that every step
//! which may build a value of data-dependent size, or put one value inside another, first calls
//! a guard function; the guards measure what the step will build, charge it to the render's
//! budget, and refuse the step (an error the template cannot catch) when the budget is spent.
//!
//! Three limits, all per render:
//! - bytes: every string, list and map built by an operator (`+`, `*`, `~`, slicing, list and
//!   map literals), by a filter, a method or a function, and every byte written to the output
//!   or a capture (`{% set %}` blocks, macro calls), is charged before it is built. Charges are
//!   never refunded, so what is alive at any moment is at most what was charged.
//! - shape: a list or map built during the render holds at most [`MAX_DEPTH`] levels and at most
//!   the tree-size limit counted as a tree (so a list repeated inside itself cannot stand for an
//!   exponentially long text); a namespace (the one mutable object) is never put inside another
//!   value, and what a loop iterates holds no loop or macro. Without these, dropping, printing or
//!   comparing a deep value recurses past any thread's stack.
//! - work: the guards' own walks over values, and the comparisons they guard, count visited
//!   nodes against an allowance, so that re-inspecting one large value in a loop ends.
//!
//! Small fixed-size allocations of single instructions (a loop's state, a macro object, a frame)
//! are bounded by the fuel instead.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State};

use crate::error::Status;

/// Levels of nesting a value built during a render may have (a chat is a list of maps: 2;
/// tool schemas a dozen). A walk of a value this deep stays far inside any thread's stack.
pub const MAX_DEPTH: usize = 64;
/// Bytes a value is counted as in the tree-size limit, besides its text: a node of a list or map.
pub const NODE_BYTES: usize = 16;
/// What one element of a list built by a step is charged (a `Value` is 24 bytes; the rest covers
/// the list's own header and growth).
pub const ELEMENT_BYTES: usize = 32;

/// The limits of one render and what is left of them. Shared by the guard functions of the
/// render's environment (which must be `Send + Sync`, hence atomics).
pub struct Budget {
    bytes_total: usize,
    bytes_left: AtomicUsize,
    /// The largest tree size (text bytes + [`NODE_BYTES`] per node) of a value built by a step.
    tree_limit: usize,
    work_total: u64,
    work_left: AtomicU64,
    /// The first refusal: the status and message the render returns.
    refusal: Mutex<Option<(Status, String)>>,
    /// How `bytes_total` was computed, for messages.
    bytes_rule: String,
    /// A list `+` or `*` built, to stand for minijinja's result of the same operation.
    built: Mutex<Option<Value>>,
    /// Shapes of large lists and maps already walked, by address (see [`MEMO_NODES`]).
    memo: Mutex<HashMap<usize, (Value, Shape)>>,
    /// Bytes printed so far, to the output or into a capture (a macro's call, a set block).
    printed: AtomicUsize,
    output_cap: usize,
}

/// What a render may print in all, output and captured text together, per byte of its output
/// cap (a template that renders each message through a macro prints it twice).
pub const PRINTED_PER_OUTPUT_BYTE: usize = 2;

impl Budget {
    pub fn new(bytes: usize, bytes_rule: String, output_cap: usize, work: u64) -> Budget {
        Budget {
            printed: AtomicUsize::new(0),
            memo: Mutex::new(HashMap::new()),
            built: Mutex::new(None),
            output_cap,
            bytes_total: bytes,
            bytes_left: AtomicUsize::new(bytes),
            tree_limit: bytes,
            work_total: work,
            work_left: AtomicU64::new(work),
            refusal: Mutex::new(None),
            bytes_rule,
        }
    }

    /// The refusal recorded by a guard, if any.
    pub fn refusal(&self) -> Option<(Status, String)> {
        self.refusal.lock().ok().and_then(|r| r.clone())
    }

    /// Records a refusal (the first one wins) and gives the error that stops the render.
    pub fn refuse(&self, status: Status, message: String) -> Error {
        if let Ok(mut r) = self.refusal.lock() {
            r.get_or_insert((status, message.clone()));
        }
        Error::new(ErrorKind::InvalidOperation, message)
    }

    fn stash(&self, v: Value) {
        if let Ok(mut built) = self.built.lock() {
            *built = Some(v);
        }
    }

    pub fn bytes_left(&self) -> usize {
        self.bytes_left.load(Ordering::Relaxed)
    }

    /// Charges `bytes` for `what`, or refuses when fewer are left.
    pub fn charge(&self, bytes: usize, what: &dyn Fn() -> String) -> Result<(), Error> {
        let taken = self.bytes_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(bytes));
        match taken {
            Ok(_) => Ok(()),
            Err(left) => {
                // usize::MAX stands for "more than was left", when measuring stopped there.
                let size = if bytes == usize::MAX { "more than that".to_string() } else { format!("{bytes} bytes") };
                Err(self.refuse(
                    Status::ErrLimitExceeded,
                    format!(
                        "{} would build {size}: {left} bytes are left of this render's allocation budget of {} bytes ({})",
                        what(),
                        self.bytes_total,
                        self.bytes_rule
                    ),
                ))
            }
        }
    }

    /// Charges `bytes` printed (usize::MAX: more than the budget has left), within the limit of
    /// [`PRINTED_PER_OUTPUT_BYTE`] x the output cap.
    pub fn print(&self, bytes: usize) -> Result<(), Error> {
        let limit = self.output_cap.saturating_mul(PRINTED_PER_OUTPUT_BYTE);
        let before = self.printed.fetch_add(bytes.min(limit + 1), Ordering::Relaxed);
        if before.saturating_add(bytes) > limit {
            return Err(self.refuse(
                Status::ErrLimitExceeded,
                format!(
                    "output passed {limit} bytes counting captured text ({PRINTED_PER_OUTPUT_BYTE} x the output cap of {} bytes: 1 MiB + 4 x the messages' text)",
                    self.output_cap
                ),
            ));
        }
        self.charge(bytes, &|| "printing".to_string())
    }

    /// Counts `units` of inspection work (a node visited, or 16 bytes of text compared).
    fn work(&self, units: u64) -> Result<(), Error> {
        match self.work_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(units)) {
            Ok(_) => Ok(()),
            Err(_) => Err(self.refuse(
                Status::ErrLimitExceeded,
                format!("inspecting values took more than this render's allowance of {} steps", self.work_total),
            )),
        }
    }
}

/// A writer that only counts, and fails once past `cap` bytes (so measuring a value costs at
/// most `cap` bytes of formatting, however large the value would print).
struct Measure {
    len: usize,
    cap: usize,
}

impl fmt::Write for Measure {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.len = self.len.saturating_add(s.len());
        if self.len > self.cap {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// A string writer that fails instead of growing past `cap` bytes.
pub struct Bounded {
    pub text: String,
    cap: usize,
}

impl Bounded {
    pub fn new(cap: usize) -> Bounded {
        Bounded { text: String::new(), cap }
    }
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.text.len().saturating_add(s.len()) > self.cap {
            return Err(fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// The byte length of `v` printed (as `{{ v }}` or `~` print it), or None when longer than `cap`.
pub fn text_len(v: &Value, cap: usize) -> Option<usize> {
    if let Some(s) = v.as_str() {
        return (s.len() <= cap).then_some(s.len());
    }
    let mut m = Measure { len: 0, cap };
    write!(m, "{v}").ok().map(|_| m.len)
}

/// The byte length of `v`'s debug form (`pprint`, `%r`), or None when longer than `cap`.
pub fn debug_len(v: &Value, cap: usize) -> Option<usize> {
    let mut m = Measure { len: 0, cap };
    write!(m, "{v:#?}").ok().map(|_| m.len)
}

/// What a walk over a value found (whatever level the value is placed at).
#[derive(Clone, Copy, Debug, Default)]
pub struct Shape {
    /// Levels of lists and maps (0 for a string or number).
    pub depth: usize,
    /// Text bytes + [`NODE_BYTES`] per node, counted as a tree (a list holding one value twice
    /// counts it twice: printing it prints it twice).
    pub tree: usize,
    /// Nodes, counted as a tree.
    pub nodes: usize,
    /// A namespace below the value itself.
    namespace_below: bool,
    /// A loop, macro or other opaque object below the value itself.
    opaque_below: bool,
}

/// A walk remembers the shape of a list or map of at least this many nodes, by its address,
/// so that walking it again (it is held in a loop, or twice in one list) costs one step.
const MEMO_NODES: usize = 64;

/// What a walk refuses to find inside the value (at depth 1 or more; the value itself is
/// checked by the caller).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Forbid {
    /// A namespace: it is mutable, so a value holding one could grow after it was checked.
    Namespace,
    /// A namespace, or a loop, macro or other opaque object (what a loop iterates, what a
    /// loop's `changed` or a `cycler` keeps): an opaque object may itself keep values.
    NamespaceOrOpaque,
}

/// The type name minijinja's `namespace()` objects report (they are the only mutable values).
fn namespace_type() -> &'static str {
    static NAME: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        minijinja::functions::namespace(None)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.type_name()))
            .unwrap_or("minijinja::value::namespace_object::Namespace")
    })
}

pub fn is_namespace(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.type_name() == namespace_type())
}

/// A loop's state, a macro, a function, a `cycler`...: objects that are not plain data. A walk
/// does not look inside them (a loop's attributes would read ahead in what it iterates).
fn is_opaque(v: &Value) -> bool {
    v.kind() == ValueKind::Plain || is_loop(v)
}

impl Budget {
    /// Walks `v` (the value to be placed at nesting level `level` of a new value) and checks the
    /// shape rules: depth at most [`MAX_DEPTH`], tree size within the limit, nothing `forbid`
    /// names inside (nor the value itself, when it is placed inside another). `what` names the
    /// step for messages.
    pub fn shape(&self, v: &Value, level: usize, forbid: Forbid, what: &dyn Fn() -> String) -> Result<Shape, Error> {
        let shape = self.walk(v, level, what)?;
        let (namespace, opaque) = if level > 0 {
            (is_namespace(v) || shape.namespace_below, is_opaque(v) || shape.opaque_below)
        } else {
            (shape.namespace_below, shape.opaque_below)
        };
        self.check_found(namespace, opaque, forbid, v, what)?;
        Ok(shape)
    }

    /// [`Budget::shape`] of the items of a new list (or the keys and values of a new map), as
    /// one value one level above them.
    pub fn shape_items(&self, items: &[Value], forbid: Forbid, what: &dyn Fn() -> String) -> Result<Shape, Error> {
        let mut shape = Shape { depth: 0, tree: NODE_BYTES, nodes: 1, ..Shape::default() };
        for v in items {
            self.add_child(&mut shape, v, 1, what)?;
        }
        self.check_found(shape.namespace_below, shape.opaque_below, forbid, &Value::from(()), what)?;
        Ok(shape)
    }

    fn check_found(&self, namespace: bool, opaque: bool, forbid: Forbid, v: &Value, what: &dyn Fn() -> String) -> Result<(), Error> {
        if namespace {
            return Err(self.refuse(
                Status::ErrUnsupported,
                format!("{} would put a namespace inside another value (a namespace can only be a variable)", what()),
            ));
        }
        if opaque && forbid == Forbid::NamespaceOrOpaque {
            return Err(self.refuse(
                Status::ErrUnsupported,
                format!("{} would keep a loop, macro or other object inside a value that outlives it ({v:?})", what()),
            ));
        }
        Ok(())
    }

    /// The shape of `v`, placed at `level`: recursion stops past [`MAX_DEPTH`] levels and the
    /// tree size past the limit; every node visited counts one step of work.
    fn walk(&self, v: &Value, level: usize, what: &dyn Fn() -> String) -> Result<Shape, Error> {
        if level > MAX_DEPTH {
            return Err(self.refuse(Status::ErrLimitExceeded, format!("{} would nest values more than {MAX_DEPTH} levels deep", what())));
        }
        let leaf = Shape { depth: 0, tree: NODE_BYTES + v.as_str().map_or(0, str::len), nodes: 1, ..Shape::default() };
        let Some(object) = v.as_object() else {
            self.work(1)?;
            return Ok(leaf);
        };
        if is_opaque(v) || is_namespace(v) {
            // Not looked inside: a namespace inside a value is refused, an opaque object is a
            // leaf (a loop's attributes would read ahead in what it iterates).
            self.work(1)?;
            return Ok(leaf);
        }
        // minijinja's own lists and maps (a map is a BTreeMap unless its preserve_order feature
        // is on; then this finds none and the generic walk below serves).
        let list = object.downcast_ref::<Vec<Value>>();
        let map = object.downcast_ref::<std::collections::BTreeMap<Value, Value>>();
        let address = list.map(|l| l as *const _ as usize).or(map.map(|m| m as *const _ as usize));
        if let Some(address) = address {
            if let Some(shape) = self.memo.lock().ok().and_then(|m| m.get(&address).map(|e| e.1)) {
                if level + shape.depth > MAX_DEPTH {
                    return Err(self.refuse(Status::ErrLimitExceeded, format!("{} would nest values more than {MAX_DEPTH} levels deep", what())));
                }
                self.check_tree(shape.tree, what)?;
                return Ok(shape);
            }
        }
        self.work(1)?;
        let mut shape = leaf;
        match (list, map) {
            (Some(items), _) => {
                for item in items {
                    self.add_child(&mut shape, item, level + 1, what)?;
                }
            }
            (None, Some(pairs)) => {
                for (key, value) in pairs {
                    self.add_child(&mut shape, key, level + 1, what)?;
                    self.add_child(&mut shape, value, level + 1, what)?;
                }
            }
            (None, None) => {
                if v.kind() == ValueKind::Map {
                    for (key, value) in object.try_iter_pairs().into_iter().flatten() {
                        self.add_child(&mut shape, &key, level + 1, what)?;
                        self.add_child(&mut shape, &value, level + 1, what)?;
                    }
                } else {
                    for item in object.try_iter().into_iter().flatten() {
                        self.add_child(&mut shape, &item, level + 1, what)?;
                    }
                }
            }
        }
        if let (Some(address), true) = (address, shape.nodes >= MEMO_NODES) {
            if let Ok(mut memo) = self.memo.lock() {
                // The value is kept, so that its address is not reused while remembered.
                memo.insert(address, (v.clone(), shape));
            }
        }
        Ok(shape)
    }

    fn add_child(&self, shape: &mut Shape, child: &Value, level: usize, what: &dyn Fn() -> String) -> Result<(), Error> {
        let c = self.walk(child, level, what)?;
        shape.depth = shape.depth.max(c.depth + 1);
        shape.tree = shape.tree.saturating_add(c.tree);
        shape.nodes = shape.nodes.saturating_add(c.nodes);
        shape.namespace_below |= is_namespace(child) || c.namespace_below;
        shape.opaque_below |= is_opaque(child) || c.opaque_below;
        self.check_tree(shape.tree, what)
    }

    fn check_tree(&self, tree: usize, what: &dyn Fn() -> String) -> Result<(), Error> {
        if tree > self.tree_limit {
            return Err(self.refuse(
                Status::ErrLimitExceeded,
                format!("{} would hold more than {} bytes counted as a tree (text + {NODE_BYTES} per element; the limit is the allocation budget)", what(), self.tree_limit),
            ));
        }
        Ok(())
    }

    /// The items of a list-like value, collected for a step that builds a list from them:
    /// refused when they would be more than the budget can hold.
    fn collect_items(&self, v: &Value, what: &dyn Fn() -> String) -> Result<Vec<Value>, Error> {
        let max = self.bytes_left() / ELEMENT_BYTES;
        if let Some(n) = v.len() {
            if n > max {
                self.charge(n.saturating_mul(ELEMENT_BYTES), what)?;
            }
        }
        let mut items = Vec::new();
        for item in v.try_iter()? {
            if items.len() >= max {
                self.charge(items.len().saturating_add(1).saturating_mul(ELEMENT_BYTES), what)?;
            }
            items.push(item);
        }
        Ok(items)
    }
}

/// Names of the guard functions the rewritten instructions call. A colon cannot appear in a
/// template's identifier, so no template can shadow or call them by name.
pub const G_CHARGE_RAW: &str = "packlm:raw";
pub const G_EMIT: &str = "packlm:emit";
pub const G_CONCAT: &str = "packlm:concat";
pub const G_ADD: &str = "packlm:add";
pub const G_MUL: &str = "packlm:mul";
pub const G_RESULT: &str = "packlm:result";
pub const G_SLICE: &str = "packlm:slice";

/// A slice's arguments (value, start, stop, step) with a negative step made safe for
/// minijinja 2.24's backward slicing (`range_step_backwards` in its value/ops.rs), which over
/// an empty value indexes element 0 (`""[::-1]` panicked: a fuzzer's finding), subtracts
/// `start - stop` without a check where the stop lies past the start (an overflow where
/// overflow checks are on), and negates the step (`i64::MIN`). Where minijinja's own
/// arithmetic makes the slice empty, it becomes `[0:0:1]` of the same value, which is empty
/// and of the same kind; `i64::MIN` becomes `i64::MIN + 1`, which takes the same one element.
/// Anything else (a positive step, arguments that are not integers, which minijinja refuses)
/// passes unchanged.
fn backward_slice_args(mut args: Vec<Value>) -> Vec<Value> {
    let int = |v: &Value| -> Option<Option<i64>> {
        if v.is_none() || v.is_undefined() {
            Some(None)
        } else {
            i64::try_from(v.clone()).ok().map(Some)
        }
    };
    let [value, start, stop, step] = &args[..] else { return args };
    let (Some(start), Some(stop), Some(Some(step))) = (int(start), int(stop), int(step)) else { return args };
    if step >= 0 {
        return args;
    }
    let n = match value.as_str() {
        Some(s) => s.chars().count(),
        None => match value.len() {
            Some(n) => n,
            None => return args,
        },
    } as i64;
    // minijinja's start and stop for a backward slice.
    let first = match start {
        None => (n - 1).max(0),
        Some(s) if s >= n => (n - 1).max(0),
        Some(s) if s >= 0 => s,
        Some(s) => n.saturating_add(s).max(0),
    };
    let last = match stop {
        None => 0,
        Some(s) if s < 0 => n.saturating_add(s).max(0),
        Some(s) => s,
    };
    if n == 0 || (last != 0 && last > first) {
        args[1] = Value::from(0);
        args[2] = Value::from(0);
        args[3] = Value::from(1);
    } else if step == i64::MIN {
        args[3] = Value::from(i64::MIN + 1);
    }
    args
}
pub const G_COMPARE: &str = "packlm:compare";
pub const G_BUILD: &str = "packlm:build";
pub const G_KWARGS: &str = "packlm:kwargs";
pub const G_SET_ATTR: &str = "packlm:set_attr";
pub const G_ITERABLE: &str = "packlm:iterable";
pub const G_METHOD_ARGS: &str = "packlm:method_args";
pub const G_OBJECT_ARGS: &str = "packlm:object_args";
pub const G_LOOP_ARGS: &str = "packlm:loop_args";
pub const G_AUTOESCAPE: &str = "packlm:autoescape";
pub const G_TOO_LONG: &str = "packlm:too_long";

/// `args` handed back for `UnpackList`, which pushes a list's items first-item-on-top.
fn for_unpack(args: Vec<Value>) -> Value {
    Value::from(args.into_iter().rev().collect::<Vec<_>>())
}

/// Registers an arguments guard twice: as `name`, handing the arguments back for `UnpackList`
/// (a call with a fixed count), and as `name*`, in order for `UnpackLists` (arguments spread
/// from a list, whose count is pushed again after them).
fn add_args_guard(env: &mut Environment, name: &'static str, budget: &Arc<Budget>, check: fn(&Budget, &[Value]) -> Result<(), Error>) {
    let b = Arc::clone(budget);
    env.add_function(name, move |args: Rest<Value>| -> Result<Value, Error> {
        check(&b, &args)?;
        Ok(for_unpack(args.0))
    });
    let b = Arc::clone(budget);
    env.add_function(spread_name(name), move |args: Rest<Value>| -> Result<Value, Error> {
        check(&b, &args)?;
        Ok(Value::from(args.0))
    });
}

/// The name under which [`add_args_guard`] registers the in-order form of `name`.
pub fn spread_name(name: &'static str) -> &'static str {
    match name {
        G_METHOD_ARGS => "packlm:method_args*",
        G_OBJECT_ARGS => "packlm:object_args*",
        _ => "packlm:loop_args*",
    }
}

/// Whether `v` is a loop object (a loop's state, as `loop` names it in the body).
fn is_loop(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.type_name().ends_with("::Loop"))
}

/// What a loop iterates: no loop, macro or namespace inside (a loop keeps its iterable, so a
/// loop found inside would make a chain of loops as long as the render runs).
fn check_iterable(b: &Budget, v: &Value) -> Result<(), Error> {
    if v.as_object().is_some() && !is_namespace(v) {
        b.shape(v, 0, Forbid::NamespaceOrOpaque, &|| "a for loop".to_string())?;
    }
    Ok(())
}

/// Arguments a callee may keep (a loop's `changed` keeps them until the next call).
fn check_kept(b: &Budget, args: &[Value], what: &str) -> Result<(), Error> {
    for v in args {
        if v.as_object().is_none() || v.is_kwargs() {
            continue;
        }
        if is_opaque(v) || is_namespace(v) {
            return Err(b.refuse(Status::ErrUnsupported, format!("{what} would keep a loop, macro or namespace ({v:?})")));
        }
        b.shape(v, 0, Forbid::NamespaceOrOpaque, &|| what.to_string())?;
    }
    Ok(())
}

fn check_method_args(b: &Budget, args: &[Value]) -> Result<(), Error> {
    check_kept(b, args.get(1..).unwrap_or_default(), "a method's arguments")
}

/// A loop called recursively (`loop(children)`) iterates its argument; a macro or `caller`
/// keeps nothing.
fn check_object_args(b: &Budget, args: &[Value]) -> Result<(), Error> {
    match args.split_first() {
        Some((callee, rest)) if is_loop(callee) => rest.iter().try_for_each(|v| check_iterable(b, v)),
        _ => Ok(()),
    }
}

fn check_loop_args(b: &Budget, args: &[Value]) -> Result<(), Error> {
    args.iter().try_for_each(|v| check_iterable(b, v))
}

/// Registers the guard functions the rewritten instructions call.
pub fn install_guards(env: &mut Environment, budget: &Arc<Budget>) {
    let b = Arc::clone(budget);
    env.add_function(G_CHARGE_RAW, move |n: usize| -> Result<Value, Error> {
        b.print(n)?;
        Ok(Value::from(()))
    });
    let b = Arc::clone(budget);
    env.add_function(G_EMIT, move |state: &State, v: Value| -> Result<Value, Error> {
        // With autoescape on (refused below unless false), a byte prints as up to six.
        let escape = if matches!(state.auto_escape(), AutoEscape::None) { 1 } else { 6 };
        let len = text_len(&v, b.bytes_left() / escape).map_or(usize::MAX, |n| n * escape);
        b.print(len)?;
        Ok(v)
    });
    let b = Arc::clone(budget);
    env.add_function(G_CONCAT, move |a: Value, c: Value| -> Result<Value, Error> {
        let mut out = Bounded::new(b.bytes_left());
        let len = match write!(out, "{a}{c}") {
            Ok(()) => out.text.len(),
            Err(_) => usize::MAX,
        };
        b.charge(len, &|| "`~`".to_string())?;
        Ok(Value::from(out.text))
    });
    let b = Arc::clone(budget);
    env.add_function(G_ADD, move |a: Value, c: Value| add(&b, a, c));
    let b = Arc::clone(budget);
    env.add_function(G_MUL, move |a: Value, c: Value| mul(&b, a, c));
    let b = Arc::clone(budget);
    env.add_function(G_RESULT, move |v: Value| -> Result<Value, Error> {
        Ok(b.built.lock().ok().and_then(|mut built| built.take()).unwrap_or(v))
    });
    let b = Arc::clone(budget);
    env.add_function(G_SLICE, move |args: Rest<Value>| -> Result<Value, Error> {
        // A slice holds at most what it slices.
        let v = args.first().cloned().unwrap_or_default();
        let bytes = match v.as_str() {
            Some(s) => s.len(),
            None => {
                // An iterable of unknown length is counted, up to what the budget could hold.
                let cap = b.bytes_left() / ELEMENT_BYTES + 1;
                let n = v.len().unwrap_or_else(|| v.try_iter().map_or(0, |items| items.take(cap).count()));
                n.saturating_mul(ELEMENT_BYTES)
            }
        };
        b.charge(bytes, &|| "a slice".to_string())?;
        Ok(for_unpack(backward_slice_args(args.0)))
    });
    let b = Arc::clone(budget);
    env.add_function(G_COMPARE, move |a: Value, c: Value| -> Result<Value, Error> {
        // Comparing walks both sides: the walk is counted as the comparison's work.
        for v in [&a, &c] {
            match v.as_str() {
                Some(s) => b.work((s.len() / 16) as u64)?,
                None if v.as_object().is_some() && !is_opaque(v) => {
                    b.shape(v, 0, Forbid::Namespace, &|| "a comparison".to_string())?;
                }
                None => {}
            }
        }
        Ok(for_unpack(vec![a, c]))
    });
    let b = Arc::clone(budget);
    env.add_function(G_BUILD, move |args: Rest<Value>| -> Result<Value, Error> {
        let what = || "a list or map literal".to_string();
        b.shape_items(&args, Forbid::Namespace, &what)?;
        b.charge(args.len().saturating_mul(ELEMENT_BYTES).saturating_add(64), &what)?;
        Ok(for_unpack(args.0))
    });
    let b = Arc::clone(budget);
    env.add_function(G_KWARGS, move |args: Rest<Value>| -> Result<Value, Error> {
        // A keyword argument may itself be a namespace or a macro (`caller`): the callee decides
        // what it keeps (`namespace()` and `dict()` refuse a namespace). What they hold follows
        // the rules of a list.
        let what = || "keyword arguments".to_string();
        for v in args.iter().filter(|v| v.as_object().is_some()) {
            b.shape(v, 0, Forbid::Namespace, &what)?;
        }
        b.charge(args.len().saturating_mul(ELEMENT_BYTES).saturating_add(64), &what)?;
        Ok(for_unpack(args.0))
    });
    let b = Arc::clone(budget);
    env.add_function(G_SET_ATTR, move |v: Value, ns: Value| -> Result<Value, Error> {
        b.check_stored(&v, "setting a namespace attribute")?;
        b.charge(ELEMENT_BYTES + 64, &|| "setting a namespace attribute".to_string())?;
        Ok(for_unpack(vec![v, ns]))
    });
    let b = Arc::clone(budget);
    env.add_function(G_ITERABLE, move |v: Value| -> Result<Value, Error> {
        check_iterable(&b, &v)?;
        Ok(v)
    });
    add_args_guard(env, G_METHOD_ARGS, budget, check_method_args);
    add_args_guard(env, G_OBJECT_ARGS, budget, check_object_args);
    add_args_guard(env, G_LOOP_ARGS, budget, check_loop_args);
    let b = Arc::clone(budget);
    env.add_function(G_AUTOESCAPE, move |enabled: Value| -> Result<Value, Error> {
        if enabled.is_true() {
            return Err(b.refuse(Status::ErrUnsupported, "`{% autoescape %}` is not supported in chat templates (they render text, not HTML)".to_string()));
        }
        Ok(enabled)
    });
    let b = Arc::clone(budget);
    env.add_function(G_TOO_LONG, move || -> Result<Value, Error> {
        Err(b.refuse(Status::ErrLimitExceeded, "a list, map or argument list literal of more than 65535 entries".to_string()))
    });
}

impl Budget {
    /// The rules for a value stored where it may outlive the step (a namespace attribute, a
    /// namespace's or dict's initial values): no namespace anywhere in it, shape limits.
    pub fn check_stored(&self, v: &Value, what: &str) -> Result<(), Error> {
        if is_namespace(v) {
            return Err(self.refuse(Status::ErrUnsupported, format!("{what}: a namespace cannot be stored in another value")));
        }
        self.shape(v, 1, Forbid::Namespace, &|| what.to_string())?;
        Ok(())
    }
}

/// Whether `v` is a list-like value `+` and `*` treat as a sequence.
fn is_sequence(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
}

/// `a + b`: strings are charged their joined length; two sequences are joined here into a list,
/// charged and shape-checked (minijinja would join them lazily, into an object a walk cannot
/// remember, leaving a chain that grows one level per `+` in a loop); anything else is
/// minijinja's own `+`.
fn add(b: &Budget, a: Value, c: Value) -> Result<Value, Error> {
    let what = || "`+`".to_string();
    if is_sequence(&a) && is_sequence(&c) {
        let mut items = b.collect_items(&a, &what)?;
        items.extend(b.collect_items(&c, &what)?);
        b.charge(items.len().saturating_mul(ELEMENT_BYTES), &what)?;
        let joined = Value::from(items);
        b.shape(&joined, 0, Forbid::Namespace, &what)?;
        // minijinja's own `+` then runs on two empty lists, and `packlm:result` puts the list
        // built here in place of its (lazy) result.
        b.stash(joined);
        return Ok(Value::from(vec![Value::from(Vec::<Value>::new()), Value::from(Vec::<Value>::new())]));
    }
    if let (Some(x), Some(y)) = (a.as_str(), c.as_str()) {
        b.charge(x.len().saturating_add(y.len()), &what)?;
    }
    Ok(Value::from(vec![c, a]))
}

/// `a * b`: a string repeated is charged its length; a sequence repeated is built here (so that
/// no lazy repetition of 10^12 items exists to be turned into a list later).
fn mul(b: &Budget, a: Value, c: Value) -> Result<Value, Error> {
    let what = || "`*`".to_string();
    let (seq, n) = if is_sequence(&a) { (&a, &c) } else { (&c, &a) };
    if is_sequence(seq) {
        if let Some(n) = n.as_usize() {
            let items = b.collect_items(seq, &what)?;
            b.charge(items.len().saturating_mul(n).saturating_mul(ELEMENT_BYTES), &what)?;
            let mut repeated = Vec::with_capacity(items.len() * n);
            for _ in 0..n {
                repeated.extend(items.iter().cloned());
            }
            let repeated = Value::from(repeated);
            b.shape(&repeated, 0, Forbid::Namespace, &what)?;
            b.stash(repeated);
            return Ok(Value::from(vec![Value::from(0), Value::from(Vec::<Value>::new())]));
        }
    }
    let (s, n) = match (a.as_str(), c.as_str()) {
        (Some(s), _) => (Some(s), &c),
        (None, Some(s)) => (Some(s), &a),
        _ => (None, &c),
    };
    if let (Some(s), Some(n)) = (s, n.as_usize()) {
        b.charge(s.len().saturating_mul(n), &what)?;
    }
    Ok(Value::from(vec![c, a]))
}
