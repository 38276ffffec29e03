//! A KV plane in host memory as a list of fixed-size pages shared copy-on-write: a fork
//! (`KvStore::fork`) takes its source's page list, bumping reference counts and copying no
//! key or value; a store then writing into a page another store still holds copies that one
//! page first (`Arc::make_mut`). Only the page a store appends into can be shared and written,
//! so a fork of an n-position conversation costs at most one page per plane beyond its own new
//! rows.
//!
//! Rows past a truncate stay in their page until the next append into it (a truncate copies
//! nothing: a verify's rollback on a fork must not copy the page it shares). Readers take only
//! rows below the plane's `len`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Positions a host page holds. Attention reads a page's rows as one slice and splits its key
/// runs at page boundaries; a run's arithmetic does not depend on where it is split
/// (attention.rs), so the page size never changes a bit.
pub const PAGE_ROWS: usize = 64;

/// Bytes of every page alive in a family of stores that share pages (a session, its forks and
/// theirs): what their keys and values cost together.
pub type Ledger = Arc<AtomicUsize>;

/// `PAGE_ROWS` positions of one plane: keys and values, `[rows][width]` each, `rows` the
/// rows written so far (possibly stale past the plane's `len` after a truncate).
#[derive(Debug)]
pub struct Page {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    ledger: Ledger,
    width: usize,
}

impl Page {
    fn new(width: usize, ledger: &Ledger) -> Page {
        ledger.fetch_add(Self::bytes(width), Ordering::Relaxed);
        Page { k: Vec::with_capacity(PAGE_ROWS * width), v: Vec::with_capacity(PAGE_ROWS * width), ledger: ledger.clone(), width }
    }
    fn bytes(width: usize) -> usize {
        2 * PAGE_ROWS * width * std::mem::size_of::<f32>()
    }
}

/// The copy a store makes before writing into a page another store holds: the same rows, a
/// whole page's room, counted in the same ledger.
impl Clone for Page {
    fn clone(&self) -> Page {
        let mut p = Page::new(self.width, &self.ledger);
        p.k.extend_from_slice(&self.k);
        p.v.extend_from_slice(&self.v);
        p
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.ledger.fetch_sub(Self::bytes(self.width), Ordering::Relaxed);
    }
}

/// One layer's keys and values as pages: positions `i * PAGE_ROWS ..` in page i.
#[derive(Clone, Debug)]
pub struct PagedPlane {
    pub width: usize,
    pub pages: Vec<Arc<Page>>,
    /// Rows written: those held plus those of a pass in flight.
    pub len: usize,
}

impl PagedPlane {
    pub fn new(width: usize) -> PagedPlane {
        PagedPlane { width, pages: Vec::new(), len: 0 }
    }

    /// The plane holding `k` and `v` (`[rows][width]` each) in pages of this family.
    pub fn from_rows(width: usize, k: &[f32], v: &[f32], ledger: &Ledger) -> PagedPlane {
        let mut p = PagedPlane::new(width);
        p.append(k, v, k.len() / width.max(1), ledger);
        p
    }

    /// Appends `rows` rows of `k` and `v` after the rows written, copying first a page it
    /// writes into that another store shares.
    pub fn append(&mut self, k: &[f32], v: &[f32], rows: usize, ledger: &Ledger) {
        let w = self.width;
        let mut done = 0;
        while done < rows {
            let (page, off) = (self.len / PAGE_ROWS, self.len % PAGE_ROWS);
            self.pages.truncate(page + usize::from(off > 0));
            if off == 0 {
                self.pages.push(Arc::new(Page::new(w, ledger)));
            }
            let p = Arc::make_mut(self.pages.last_mut().expect("a page was just ensured"));
            p.k.truncate(off * w);
            p.v.truncate(off * w);
            let take = (rows - done).min(PAGE_ROWS - off);
            p.k.extend_from_slice(&k[done * w..(done + take) * w]);
            p.v.extend_from_slice(&v[done * w..(done + take) * w]);
            (done, self.len) = (done + take, self.len + take);
        }
    }

    /// Keeps the first `n` rows written; pages wholly past them are let go, nothing is copied.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
        self.pages.truncate(self.len.div_ceil(PAGE_ROWS));
    }

    /// Keys and values of rows `t0..t1`, which lie in one page.
    #[inline(always)]
    pub fn span(&self, t0: usize, t1: usize) -> (&[f32], &[f32]) {
        let (page, off) = (t0 / PAGE_ROWS, t0 % PAGE_ROWS);
        debug_assert!(t1 <= self.len && t1 - t0 <= PAGE_ROWS - off);
        let p = &self.pages[page];
        let w = self.width;
        (&p.k[off * w..(off + t1 - t0) * w], &p.v[off * w..(off + t1 - t0) * w])
    }

    /// The first `rows` rows (at most `len`), keys then values, each `[rows][width]`.
    pub fn gather(&self, rows: usize) -> (Vec<f32>, Vec<f32>) {
        let rows = rows.min(self.len);
        let (mut k, mut v) = (Vec::with_capacity(rows * self.width), Vec::with_capacity(rows * self.width));
        each_page(0..rows, |t0, t1| {
            let (pk, pv) = self.span(t0, t1);
            k.extend_from_slice(pk);
            v.extend_from_slice(pv);
        });
        (k, v)
    }
}

/// The first row past the page that holds row `t`.
#[inline(always)]
pub fn page_end(t: usize) -> usize {
    (t / PAGE_ROWS + 1) * PAGE_ROWS
}

/// `f(t0, t1)` for each part of `range` that lies in one page, in order.
pub fn each_page(range: std::ops::Range<usize>, mut f: impl FnMut(usize, usize)) {
    let mut t0 = range.start;
    while t0 < range.end {
        let t1 = page_end(t0).min(range.end);
        f(t0, t1);
        t0 = t1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seed: f32, n: usize, w: usize) -> Vec<f32> {
        (0..n * w).map(|i| seed + i as f32).collect()
    }

    /// A fork shares every page until one side writes; a write copies only the written page,
    /// a truncate copies nothing, and each side keeps reading its own rows.
    #[test]
    fn a_fork_shares_pages_until_written() {
        let ledger = Ledger::default();
        let w = 3;
        let page = Page::bytes(w);
        let a0 = rows(0.0, 2 * PAGE_ROWS + 5, w);
        let mut a = PagedPlane::from_rows(w, &a0, &a0, &ledger);
        assert_eq!(ledger.load(Ordering::Relaxed), 3 * page);
        let mut b = a.clone();
        assert_eq!(ledger.load(Ordering::Relaxed), 3 * page, "a fork copies no page");
        b.truncate(PAGE_ROWS + 1);
        assert_eq!(ledger.load(Ordering::Relaxed), 3 * page, "a truncate copies no page");
        let extra = rows(1e6, 4, w);
        b.append(&extra, &extra, 4, &ledger);
        assert_eq!(ledger.load(Ordering::Relaxed), 4 * page, "the written page is copied, once");
        b.append(&extra, &extra, 4, &ledger);
        assert_eq!(ledger.load(Ordering::Relaxed), 4 * page);
        assert_eq!(a.gather(a.len).0, a0, "the source reads its own rows");
        let mut want = a0[..(PAGE_ROWS + 1) * w].to_vec();
        want.extend_from_slice(&extra);
        want.extend_from_slice(&extra);
        assert_eq!(b.gather(b.len).0, want);
        a.append(&extra, &extra, 1, &ledger);
        assert_eq!(ledger.load(Ordering::Relaxed), 4 * page, "the source's last page is its own again");
        drop((a, b));
        assert_eq!(ledger.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn pages_split_ranges_at_their_boundaries() {
        let mut parts = Vec::new();
        each_page(PAGE_ROWS - 2..3 * PAGE_ROWS + 1, |a, b| parts.push((a, b)));
        assert_eq!(parts, [(PAGE_ROWS - 2, PAGE_ROWS), (PAGE_ROWS, 2 * PAGE_ROWS), (2 * PAGE_ROWS, 3 * PAGE_ROWS), (3 * PAGE_ROWS, 3 * PAGE_ROWS + 1)]);
    }
}
