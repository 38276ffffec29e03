//! Compiling a chat template for a guarded render: minijinja's parser and code generator, with
//! two changes. Before code generation, every constant expression the generator would fold
//! (`'x' * 100000000`, `[1] * 10**12 ~ ''`) is bounded and charged to the render's budget,
//! since folding runs minijinja's operators at compile time, outside any guard. After it, the
//! instructions are rewritten to call a guard (`chat_guard`) before each step that may build
//! something large or put one value inside another.

use std::collections::BTreeMap;

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt, UnaryOpKind};
use minijinja::machinery::{parse, CodeGenerator, Instruction, Instructions, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Value;
use minijinja::Error;

use crate::pack::chat_guard::{self as guard, text_len, Budget, ELEMENT_BYTES};

/// The template's instructions and its blocks' instructions, guarded.
pub struct Compiled<'s> {
    pub instructions: Instructions<'s>,
    pub blocks: BTreeMap<&'s str, Instructions<'s>>,
}

/// Parses `source` (named `name` in messages), bounds its constant expressions against
/// `budget`, generates and rewrites its instructions.
pub fn compile<'s>(name: &'s str, source: &'s str, budget: &Budget) -> Result<Compiled<'s>, Error> {
    // `SyntaxConfig` is a unit struct unless minijinja's custom_syntax feature is on.
    #[allow(clippy::default_constructed_unit_structs)]
    let ast = parse(source, name, SyntaxConfig::default(), WhitespaceConfig::default())?;
    Folds { budget }.stmt(&ast)?;
    let mut generator = CodeGenerator::new(name, source);
    generator.compile_stmt(&ast);
    let (instructions, blocks) = generator.finish();
    Ok(Compiled {
        instructions: rewrite(&instructions),
        blocks: blocks.iter().map(|(name, b)| (*name, rewrite(b))).collect(),
    })
}

/// Visits every expression of a template and charges each operation the code generator will
/// fold (one whose operands are constants or folded operations), by an upper bound of its
/// value's printed size computed without folding it (operands are only evaluated when their own
/// bound is tiny: a repeat count).
struct Folds<'b> {
    budget: &'b Budget,
}

/// Printed bytes of a number or boolean, at most.
const SCALAR_BYTES: usize = 64;

impl Folds<'_> {
    fn stmts(&self, stmts: &[Stmt]) -> Result<(), Error> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&self, stmt: &Stmt) -> Result<(), Error> {
        match stmt {
            Stmt::Template(t) => self.stmts(&t.children),
            Stmt::EmitExpr(e) => self.root(&e.expr),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
            Stmt::ForLoop(f) => {
                self.root(&f.target)?;
                self.root(&f.iter)?;
                if let Some(e) = &f.filter_expr {
                    self.root(e)?;
                }
                self.stmts(&f.body)?;
                self.stmts(&f.else_body)
            }
            Stmt::IfCond(c) => {
                self.root(&c.expr)?;
                self.stmts(&c.true_body)?;
                self.stmts(&c.false_body)
            }
            Stmt::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.root(target)?;
                    self.root(value)?;
                }
                self.stmts(&w.body)
            }
            Stmt::Set(s) => {
                self.root(&s.target)?;
                self.root(&s.expr)
            }
            Stmt::SetBlock(s) => {
                self.root(&s.target)?;
                if let Some(f) = &s.filter {
                    self.root(f)?;
                }
                self.stmts(&s.body)
            }
            Stmt::AutoEscape(a) => {
                self.root(&a.enabled)?;
                self.stmts(&a.body)
            }
            Stmt::FilterBlock(f) => {
                self.root(&f.filter)?;
                self.stmts(&f.body)
            }
            Stmt::Block(b) => self.stmts(&b.body),
            Stmt::Import(i) => {
                self.root(&i.expr)?;
                self.root(&i.name)
            }
            Stmt::FromImport(i) => {
                self.root(&i.expr)?;
                for (name, alias) in &i.names {
                    self.root(name)?;
                    if let Some(a) = alias {
                        self.root(a)?;
                    }
                }
                Ok(())
            }
            Stmt::Extends(e) => self.root(&e.name),
            Stmt::Include(i) => self.root(&i.name),
            Stmt::Macro(m) => self.macro_decl(&m.args, &m.defaults, &m.body),
            Stmt::CallBlock(c) => {
                self.root(&c.call.expr)?;
                self.args(&c.call.args)?;
                self.macro_decl(&c.macro_decl.args, &c.macro_decl.defaults, &c.macro_decl.body)
            }
            Stmt::Do(d) => {
                self.root(&d.call.expr)?;
                self.args(&d.call.args)
            }
        }
    }

    fn macro_decl(&self, args: &[Expr], defaults: &[Expr], body: &[Stmt]) -> Result<(), Error> {
        args.iter().chain(defaults).try_for_each(|e| self.root(e))?;
        self.stmts(body)
    }

    fn args(&self, args: &[CallArg]) -> Result<(), Error> {
        args.iter().try_for_each(|a| match a {
            CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => self.root(e),
        })
    }

    /// An expression whose parent is not folded into one value with it.
    fn root(&self, e: &Expr) -> Result<(), Error> {
        self.fold(e).map(|_| ())
    }

    /// Charges an operation whose operands are all constant: the generator evaluates it (and
    /// its operands first, even when the operation itself then fails, as `'x' * 10**8 - 0`
    /// does), so every such operation is charged its value's bound, not only the outermost.
    fn folded(&self, bound: usize) -> Result<Option<usize>, Error> {
        self.budget.charge(bound, &|| "a constant expression".to_string())?;
        Ok(Some(bound))
    }

    /// The bound of `e`'s folded value when the generator folds it (None when it does not),
    /// every folded operation inside charged on the way.
    fn fold(&self, e: &Expr) -> Result<Option<usize>, Error> {
        Ok(match e {
            Expr::Const(c) => Some(text_len(&c.value, usize::MAX).unwrap_or(usize::MAX)),
            Expr::Var(_) => None,
            Expr::List(l) => {
                let mut total = Some(2usize);
                for item in &l.items {
                    let item_bound = self.fold(item)?;
                    if !matches!(item, Expr::Const(_)) {
                        total = None;
                    }
                    total = total.zip(item_bound).map(|(t, b)| t.saturating_add(b).saturating_add(ELEMENT_BYTES));
                }
                total
            }
            Expr::Map(m) => {
                let mut total = Some(2usize);
                for item in m.keys.iter().chain(&m.values) {
                    let item_bound = self.fold(item)?;
                    if !matches!(item, Expr::Const(_)) {
                        total = None;
                    }
                    total = total.zip(item_bound).map(|(t, b)| t.saturating_add(b).saturating_add(ELEMENT_BYTES));
                }
                total
            }
            Expr::UnaryOp(u) => {
                let inner = self.fold(&u.expr)?;
                match (inner, &u.op) {
                    (Some(_), UnaryOpKind::Not) => self.folded(SCALAR_BYTES)?,
                    (Some(b), UnaryOpKind::Neg) => self.folded(b.max(SCALAR_BYTES))?,
                    (None, _) => None,
                }
            }
            Expr::BinOp(op) => {
                let (left, right) = (self.fold(&op.left)?, self.fold(&op.right)?);
                match (left, right) {
                    (Some(l), Some(r)) => self.folded(self.binop_bound(op.op, &op.left, l, &op.right, r))?,
                    _ => None,
                }
            }
            Expr::Compare(c) => {
                let mut all = self.fold(&c.expr)?.is_some();
                for op in &c.ops {
                    all &= self.fold(&op.expr)?.is_some();
                }
                if all { self.folded(SCALAR_BYTES)? } else { None }
            }
            Expr::Slice(s) => {
                self.root(&s.expr)?;
                [&s.start, &s.stop, &s.step].into_iter().flatten().try_for_each(|e| self.root(e))?;
                None
            }
            Expr::IfExpr(i) => {
                self.root(&i.test_expr)?;
                self.root(&i.true_expr)?;
                if let Some(f) = &i.false_expr {
                    self.root(f)?;
                }
                None
            }
            Expr::Filter(f) => {
                if let Some(e) = &f.expr {
                    self.root(e)?;
                }
                self.args(&f.args)?;
                None
            }
            Expr::Test(t) => {
                self.root(&t.expr)?;
                self.args(&t.args)?;
                None
            }
            Expr::GetAttr(g) => {
                self.root(&g.expr)?;
                None
            }
            Expr::GetItem(g) => {
                self.root(&g.expr)?;
                self.root(&g.subscript_expr)?;
                None
            }
            Expr::Call(c) => {
                self.root(&c.expr)?;
                self.args(&c.args)?;
                None
            }
        })
    }

    /// The printed size of `left op right` folded, at most, from its operands' bounds. A
    /// repeat count is read by folding the operand when its bound is a scalar's.
    fn binop_bound(&self, op: BinOpKind, left: &Expr, l: usize, right: &Expr, r: usize) -> usize {
        let count = |e: &Expr, bound: usize| (bound <= SCALAR_BYTES).then(|| e.as_const()).flatten().and_then(|v: Value| v.as_usize());
        match op {
            BinOpKind::Add | BinOpKind::Concat => l.saturating_add(r),
            BinOpKind::Mul => match (count(left, l), count(right, r)) {
                (_, Some(n)) => l.saturating_mul(n).max(SCALAR_BYTES),
                (Some(n), _) => r.saturating_mul(n).max(SCALAR_BYTES),
                _ => l.max(r).max(SCALAR_BYTES),
            },
            BinOpKind::ScAnd | BinOpKind::ScOr => l.max(r),
            _ => SCALAR_BYTES,
        }
    }
}

/// `instructions` with a guard call before each step that may build something large or link
/// values (jump targets renumbered).
pub fn rewrite<'s>(old: &Instructions<'s>) -> Instructions<'s> {
    let n = old.len() as u32;
    let mut expansions: Vec<Vec<Instruction<'s>>> = Vec::with_capacity(n as usize);
    // start[i]: where old instruction i's expansion begins; start[n]: the new length.
    let mut start: Vec<u32> = Vec::with_capacity(n as usize + 1);
    let mut pos: u32 = 0;
    for i in 0..n {
        let ex = old.get(i).map(expand).unwrap_or_default();
        start.push(pos);
        pos += ex.len() as u32;
        expansions.push(ex);
    }
    start.push(pos);
    let target = |t: &mut u32| *t = start.get(*t as usize).copied().unwrap_or(pos);
    let mut new = Instructions::new(old.name(), old.source());
    for (i, ex) in expansions.into_iter().enumerate() {
        let span = old.get_span(i as u32);
        let line = old.get_line(i as u32);
        for mut instr in ex {
            match &mut instr {
                Instruction::Iterate(t)
                | Instruction::Jump(t)
                | Instruction::JumpIfFalse(t)
                | Instruction::JumpIfFalseOrPop(t)
                | Instruction::JumpIfTrueOrPop(t)
                | Instruction::BuildMacro(_, t, _) => target(t),
                _ => {}
            }
            match (span, line) {
                (Some(span), _) => new.add_with_span(instr, span),
                (None, Some(line)) => new.add_with_line(instr, line.min(u16::MAX as usize) as u16),
                (None, None) => new.add(instr),
            };
        }
    }
    new
}

/// The instructions that replace one: a guard call, then the step itself. A guard that hands
/// its operands back returns them in a list for `UnpackList`, which pushes a list's items
/// first-item-on-top, so the list is reversed.
fn expand<'s>(instr: &Instruction<'s>) -> Vec<Instruction<'s>> {
    use Instruction as I;
    let guarded = |g: &'static str, n: usize, then: Instruction<'s>| match u16::try_from(n) {
        Ok(n16) => vec![I::CallFunction(g, Some(n16)), I::UnpackList(n), then],
        // More operands than a call takes (a literal of 32768 entries): refused when reached.
        Err(_) => vec![I::CallFunction(guard::G_TOO_LONG, Some(0)), then],
    };
    match instr {
        I::EmitRaw(text) => vec![
            I::LoadConst(Value::from(text.len())),
            I::CallFunction(guard::G_CHARGE_RAW, Some(1)),
            I::DiscardTop,
            instr.clone(),
        ],
        I::Emit => vec![I::CallFunction(guard::G_EMIT, Some(1)), I::Emit],
        // `~` is done by its guard (minijinja's is `format!("{a}{b}")`; the guard writes the same
        // into a string that refuses to pass the budget).
        I::StringConcat => vec![I::CallFunction(guard::G_CONCAT, Some(2))],
        // For two lists, the guard builds the result and `G_RESULT` puts it in place of
        // minijinja's; for anything else `G_RESULT` hands minijinja's result on.
        I::Add => [guarded(guard::G_ADD, 2, I::Add), vec![I::CallFunction(guard::G_RESULT, Some(1))]].concat(),
        I::Mul => [guarded(guard::G_MUL, 2, I::Mul), vec![I::CallFunction(guard::G_RESULT, Some(1))]].concat(),
        I::Slice => guarded(guard::G_SLICE, 4, I::Slice),
        I::Eq | I::Ne | I::Lt | I::Lte | I::Gt | I::Gte | I::In | I::CompareAndPreserve(_) => {
            guarded(guard::G_COMPARE, 2, instr.clone())
        }
        I::BuildList(Some(n)) => guarded(guard::G_BUILD, *n, instr.clone()),
        I::BuildMap(n) => guarded(guard::G_BUILD, n.saturating_mul(2), instr.clone()),
        I::BuildKwargs(n) => guarded(guard::G_KWARGS, n.saturating_mul(2), instr.clone()),
        I::SetAttr(_) => guarded(guard::G_SET_ATTR, 2, instr.clone()),
        I::PushLoop(_) => vec![I::CallFunction(guard::G_ITERABLE, Some(1)), instr.clone()],
        // A method may keep its arguments (a loop's `changed`); a loop called recursively
        // iterates its argument.
        I::CallMethod(_, Some(n)) => guarded(guard::G_METHOD_ARGS, *n as usize, instr.clone()),
        I::CallObject(Some(n)) => guarded(guard::G_OBJECT_ARGS, *n as usize, instr.clone()),
        I::CallFunction(name, Some(n)) if *name == "loop" => guarded(guard::G_LOOP_ARGS, *n as usize, instr.clone()),
        // Arguments spread from a list (`f(*xs)`): their count is on the stack, and the guard
        // hands them back with `UnpackLists`, which pushes the count again.
        I::CallMethod(_, None) => vec![I::CallFunction(guard::spread_name(guard::G_METHOD_ARGS), None), I::UnpackLists(1), instr.clone()],
        I::CallObject(None) => vec![I::CallFunction(guard::spread_name(guard::G_OBJECT_ARGS), None), I::UnpackLists(1), instr.clone()],
        I::CallFunction(name, None) if *name == "loop" => {
            vec![I::CallFunction(guard::spread_name(guard::G_LOOP_ARGS), None), I::UnpackLists(1), instr.clone()]
        }
        I::PushAutoEscape => vec![I::CallFunction(guard::G_AUTOESCAPE, Some(1)), I::PushAutoEscape],
        _ => vec![instr.clone()],
    }
}
