//! A session's keys and values on the device, in pages shared copy-on-write with its forks, as
//! on the host (kv/pages.rs). Each layer that owns a plane has a pool: one pair of device
//! buffers (keys, values) cut into pages of `page_rows` rows, with a reference count per page,
//! shared by a session and every fork of it. A plane is the list of its pages' numbers; the
//! attention shader reads row t at `table[t / page_rows] * page_rows + t % page_rows`, the
//! table staged with each dispatch, so a page's place in the pool changes no bit.
//!
//! A pool grows by doubling (its pages copied on the device) up to the device's largest
//! binding; `reserve` takes a pass's pages before the pass writes any, so a family of forks
//! that outgrows the pool gets ErrOutOfMemory, never a half-written pass. A truncate lets pages
//! go and copies nothing; an append into a page another plane still holds copies its rows into
//! a new page first.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::gpu::device::{bytes_of, f32s, Recorder};
use crate::error::{Error, Result, Status};
use crate::kv::pages::PAGE_ROWS;
use crate::kv::KvStore;
use crate::semantics::{KvSource, LayerSpec};

/// One layer's pages for a family of stores.
pub struct Pool {
    width: usize,
    pub page_rows: usize,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    /// References to each page the buffers hold; 0 for a free one.
    refs: Vec<u32>,
    free: Vec<u32>,
    max_pages: usize,
}

impl Pool {
    /// Bytes of one page in each buffer.
    fn page_bytes(&self) -> u64 {
        (self.page_rows * self.width * 4) as u64
    }
    /// A free page with one reference, growing the buffers when none is free; None when the
    /// pool holds the most pages one binding covers.
    fn alloc(&mut self, rec: &mut Recorder) -> Option<u32> {
        if self.free.is_empty() {
            let cap = self.refs.len();
            if cap >= self.max_pages {
                return None;
            }
            let grown = (cap * 2).max(4).min(self.max_pages);
            let bytes = grown as u64 * self.page_bytes();
            let (k, v) = (rec.gpu.buffer(bytes), rec.gpu.buffer(bytes));
            let held = cap as u64 * self.page_bytes();
            rec.copy(&self.k, 0, &k, 0, held);
            rec.copy(&self.v, 0, &v, 0, held);
            (self.k, self.v) = (k, v);
            self.refs.resize(grown, 0);
            self.free.extend((cap as u32..grown as u32).rev());
        }
        let p = self.free.pop()?;
        self.refs[p as usize] = 1;
        Some(p)
    }
    fn share(&mut self, page: u32) {
        self.refs[page as usize] += 1;
    }
    fn release(&mut self, page: u32) {
        let r = &mut self.refs[page as usize];
        *r -= 1;
        if *r == 0 {
            self.free.push(page);
        }
    }
    /// Bytes of the pages in use, keys and values.
    fn bytes_in_use(&self) -> usize {
        2 * (self.refs.len() - self.free.len()) * self.page_bytes() as usize
    }
}

pub struct Plane {
    pub width: usize,
    /// Rows written (held, plus those of a pass in flight).
    pub len: usize,
    /// The pool's page numbers of rows `i * page_rows ..`: exactly `len.div_ceil(page_rows)`.
    pub pages: Vec<u32>,
    /// Pages `reserve` took for the pass in flight, not yet written.
    spare: Vec<u32>,
    pub pool: Arc<Mutex<Pool>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Plane {
    fn new(r: &Recorder, width: usize) -> Plane {
        // Pages of 64 rows, or of as many rows as one binding holds where that is fewer (a
        // device, or a test's simulated one, with small bindings).
        let per_binding = (r.max_binding / (4 * width.max(1) as u64)) as usize;
        let page_rows = PAGE_ROWS.min(per_binding).max(1);
        let max_pages = per_binding / page_rows;
        let pool = Pool { width, page_rows, k: r.gpu.buffer(4), v: r.gpu.buffer(4), refs: Vec::new(), free: Vec::new(), max_pages };
        Plane { width, len: 0, pages: Vec::new(), spare: Vec::new(), pool: Arc::new(Mutex::new(pool)) }
    }

    /// Pages an append of `rows` rows takes: new pages past the last one, and a copy of the
    /// last one when it is partly written and shared.
    fn pages_needed(&self, pool: &Pool, rows: usize) -> usize {
        let (pr, off) = (pool.page_rows, self.len % pool.page_rows);
        if rows == 0 {
            return 0;
        }
        let first_room = if off == 0 { 0 } else { pr - off };
        let shared_tail = off > 0 && self.pages.last().is_some_and(|&p| pool.refs[p as usize] > 1);
        (rows - rows.min(first_room)).div_ceil(pr) + usize::from(shared_tail)
    }

    /// Takes the pages an append of `rows` rows needs, or fails with ErrOutOfMemory (the pages
    /// taken stay spare, let go by the next truncate).
    fn reserve(&mut self, rec: &mut Recorder, rows: usize) -> Result<()> {
        let pool = self.pool.clone();
        let mut pool = lock(&pool);
        let need = self.pages_needed(&pool, rows);
        while self.spare.len() < need {
            let Some(p) = pool.alloc(rec) else {
                return Err(Error::new(
                    Status::ErrOutOfMemory,
                    format!(
                        "the device's KV pool of this session and its forks is full: {} positions of {} floats, the most one binding of this device holds",
                        pool.max_pages * pool.page_rows,
                        self.width
                    ),
                ));
            };
            self.spare.push(p);
        }
        Ok(())
    }

    /// A page of the pass: a reserved one, else a new one.
    fn take(&mut self, pool: &mut Pool, rec: &mut Recorder) -> u32 {
        self.spare.pop().or_else(|| pool.alloc(rec)).expect("a pass's KV pages are reserved before it runs (GpuKv::reserve)")
    }

    /// Appends `rows` rows of `k` and `v` (device buffers, `[rows][width]` from offset 0).
    pub fn append(&mut self, rec: &mut Recorder, k: &wgpu::Buffer, v: &wgpu::Buffer, rows: usize) {
        let pool = self.pool.clone();
        let mut pool = lock(&pool);
        let (pr, w4) = (pool.page_rows, (self.width * 4) as u64);
        let mut done = 0;
        while done < rows {
            let off = self.len % pr;
            if off == 0 {
                let p = self.take(&mut pool, rec);
                self.pages.push(p);
            } else {
                let last = *self.pages.last().expect("a partly written page");
                if pool.refs[last as usize] > 1 {
                    let p = self.take(&mut pool, rec);
                    let (from, to, bytes) = (last as u64 * pr as u64 * w4, p as u64 * pr as u64 * w4, off as u64 * w4);
                    // Through a scratch buffer: a copy may not read and write one buffer.
                    let (pk, pv, tmp) = (pool.k.clone(), pool.v.clone(), rec.gpu.buffer(2 * bytes));
                    rec.copy(&pk, from, &tmp, 0, bytes);
                    rec.copy(&pv, from, &tmp, bytes, bytes);
                    rec.copy(&tmp, 0, &pk, to, bytes);
                    rec.copy(&tmp, bytes, &pv, to, bytes);
                    pool.release(last);
                    *self.pages.last_mut().expect("a partly written page") = p;
                }
            }
            let page = *self.pages.last().expect("a page to write into") as u64;
            let take = (rows - done).min(pr - off);
            let at = (page * pr as u64 + off as u64) * w4;
            rec.copy(k, done as u64 * w4, &pool.k, at, take as u64 * w4);
            rec.copy(v, done as u64 * w4, &pool.v, at, take as u64 * w4);
            (done, self.len) = (done + take, self.len + take);
        }
    }

    fn truncate(&mut self, n: usize) {
        let mut pool = lock(&self.pool);
        self.len = self.len.min(n);
        let keep = self.len.div_ceil(pool.page_rows);
        for p in self.pages.drain(keep.min(self.pages.len())..).chain(self.spare.drain(..)) {
            pool.release(p);
        }
    }

    /// The attention shader's page table: each page's first row in the pool.
    pub fn table(&self) -> Vec<u8> {
        self.pages.iter().flat_map(|p| p.to_le_bytes()).collect()
    }

    /// A plane with this one's rows, its pages shared.
    fn fork(&self) -> Plane {
        let mut pool = lock(&self.pool);
        let keep = self.len.div_ceil(pool.page_rows);
        let pages = self.pages[..keep].to_vec();
        for &p in &pages {
            pool.share(p);
        }
        Plane { width: self.width, len: self.len, pages, spare: Vec::new(), pool: self.pool.clone() }
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        let mut pool = lock(&self.pool);
        for p in self.pages.drain(..).chain(self.spare.drain(..)) {
            pool.release(p);
        }
    }
}

pub struct GpuKv {
    rec: Arc<Mutex<Recorder>>,
    pub planes: Vec<Option<Plane>>,
    positions: usize,
}

impl GpuKv {
    pub fn new(rec: Arc<Mutex<Recorder>>, layers: &[LayerSpec]) -> GpuKv {
        let planes = {
            let r = lock(&rec);
            layers
                .iter()
                .map(|l| match l.kv_source {
                    KvSource::Own => Some(Plane::new(&r, l.kv_width())),
                    KvSource::SharedWith { .. } => None,
                })
                .collect()
        };
        GpuKv { rec, planes, positions: 0 }
    }
}

impl KvStore for GpuKv {
    fn positions(&self) -> usize {
        self.positions
    }
    fn advance(&mut self, rows: usize) {
        self.positions += rows;
    }
    fn truncate(&mut self, n: usize) {
        for p in self.planes.iter_mut().flatten() {
            p.truncate(n);
        }
        self.positions = self.positions.min(n);
    }
    fn n_layers(&self) -> usize {
        self.planes.len()
    }
    fn plane_width(&self, layer: usize) -> Option<usize> {
        self.planes.get(layer)?.as_ref().map(|p| p.width)
    }
    fn export_plane(&self, layer: usize, visit: &mut dyn FnMut(&[f32], &[f32])) {
        let Some(Some(p)) = self.planes.get(layer) else { return };
        let mut rec = lock(&self.rec);
        let pool = lock(&p.pool);
        let (pr, w) = (pool.page_rows, p.width);
        let whole = pool.refs.len() as u64 * pool.page_bytes();
        let (all_k, all_v) = (f32s(&rec.download(&pool.k, 0, whole)), f32s(&rec.download(&pool.v, 0, whole)));
        let (mut k, mut v) = (Vec::with_capacity(p.len * w), Vec::with_capacity(p.len * w));
        for (i, &page) in p.pages.iter().enumerate() {
            let rows = (p.len - i * pr).min(pr);
            let at = page as usize * pr * w;
            k.extend_from_slice(&all_k[at..at + rows * w]);
            v.extend_from_slice(&all_v[at..at + rows * w]);
        }
        rec.counters.kv_bytes_read += 2 * (p.len * w * 4) as u64;
        drop((pool, rec));
        visit(&k, &v);
    }
    fn import(&mut self, planes: Vec<Option<(Vec<f32>, Vec<f32>)>>, positions: usize) -> Result<()> {
        // The new rows go into fresh planes of this store's pools; the old planes are let go
        // only once every new one has its pages.
        let rec = self.rec.clone();
        let mut rec = lock(&rec);
        let mut fresh: Vec<Option<Plane>> = Vec::with_capacity(self.planes.len());
        for (old, new) in self.planes.iter().zip(planes) {
            let (Some(old), Some((k, v))) = (old, new) else {
                fresh.push(None);
                continue;
            };
            let mut plane = Plane { width: old.width, len: 0, pages: Vec::new(), spare: Vec::new(), pool: old.pool.clone() };
            let rows = k.len() / old.width.max(1);
            plane.reserve(&mut rec, rows)?;
            let (kb, vb) = (rec.gpu.buffer_with(&bytes_of(&k)), rec.gpu.buffer_with(&bytes_of(&v)));
            plane.append(&mut rec, &kb, &vb, rows);
            fresh.push(Some(plane));
        }
        drop(rec);
        self.planes = fresh;
        self.positions = positions;
        Ok(())
    }
    fn fork(&self) -> Box<dyn KvStore> {
        let planes = self.planes.iter().map(|p| p.as_ref().map(|p| p.fork())).collect();
        let mut f = GpuKv { rec: self.rec.clone(), planes, positions: self.positions };
        f.truncate(self.positions);
        Box::new(f)
    }
    fn family_bytes(&self) -> usize {
        self.planes.iter().flatten().map(|p| lock(&p.pool).bytes_in_use()).sum()
    }
    fn reserve(&mut self, rows: usize) -> Result<()> {
        let rec = self.rec.clone();
        let mut rec = lock(&rec);
        for p in self.planes.iter_mut().flatten() {
            p.reserve(&mut rec, rows)?;
        }
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
