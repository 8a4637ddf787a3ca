//! On-disk snapshot of one shard.
//!
//! Two files per shard in the snapshot directory:
//! - the shard's data: `shard-<k>.usearch` for a graph, exactly as `Index::save` writes it,
//!   or `shard-<k>.scan` for a scan store (`ScanStore::write_to`);
//! - `shard-<k>.meta`: our sidecar, little-endian binary:
//!   magic `FIDXSNAP`, format version u32, shard u32, shard count u32, dims u32,
//!   scalar tag u8, has-exact u8, index kind tag u8 (from version 2; version 1 files are
//!   graphs), position u64, written-at unix ms u64,
//!   graph file length u64 and checksum u64, face count u64,
//!   gallery names (u32 count, then u32 length + UTF-8 bytes each),
//!   memberships (u64 count, then face u64 + u16 count + u32 gallery ids each),
//!   exact vectors (u64 count, then face u64 + dims f32 each; count 0 without `keep_exact`),
//!   and finally the checksum (u64) of every preceding byte of the sidecar.
//!
//! The sidecar records the graph file's checksum, so the pair is only accepted together:
//! a crash between the two renames leaves a graph that does not match its sidecar, which
//! reads as "rebuild", never as a silently mixed state. Each file is written to `*.tmp`,
//! fsynced, then renamed, and the directory is fsynced so the renames survive power loss.

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::checksum::Checksum;
use crate::error::{IndexError, Result};
use crate::exact::ExactStore;
use crate::membership::Membership;
use crate::options::{IndexKind, Scalar};

const MAGIC: &[u8; 8] = b"FIDXSNAP";
const VERSION: u32 = 2;

/// The file holding shard `shard`'s faces for an index of `kind`.
pub fn data_path(dir: &Path, shard: usize, kind: IndexKind) -> PathBuf {
    match kind {
        IndexKind::Hnsw => dir.join(format!("shard-{shard}.usearch")),
        IndexKind::Scan | IndexKind::Auto => dir.join(format!("shard-{shard}.scan")),
    }
}

pub fn meta_path(dir: &Path, shard: usize) -> PathBuf {
    dir.join(format!("shard-{shard}.meta"))
}

fn tmp_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

pub fn utf8(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| IndexError::BadOption(format!("snapshot path {} is not UTF-8", p.display())))
}

/// What a shard's sidecar describes.
pub struct Header {
    pub shard: usize,
    pub shards: usize,
    pub dims: usize,
    pub scalar: Scalar,
    pub kind: IndexKind,
    pub position: u64,
    pub written_at: SystemTime,
    pub faces: u64,
}

/// Everything except the graph, as read back from a sidecar.
pub struct Sidecar {
    pub header: Header,
    pub membership: Membership,
    pub exact: Option<ExactStore>,
}

/// Writes the shard's data (via `save_graph`, which must write the given path) and the sidecar,
/// atomically replacing any previous snapshot of this shard.
pub fn write(
    dir: &Path,
    header: &Header,
    membership: &Membership,
    exact: Option<&ExactStore>,
    save_graph: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| IndexError::io(dir, e))?;
    let graph = data_path(dir, header.shard, header.kind);
    let meta = meta_path(dir, header.shard);
    let graph_tmp = tmp_path(&graph);
    let meta_tmp = tmp_path(&meta);

    save_graph(&graph_tmp)?;
    let (graph_len, graph_sum) = {
        let f = File::open(&graph_tmp).map_err(|e| IndexError::io(&graph_tmp, e))?;
        f.sync_all().map_err(|e| IndexError::io(&graph_tmp, e))?;
        let len = f
            .metadata()
            .map_err(|e| IndexError::io(&graph_tmp, e))?
            .len();
        let sum =
            Checksum::of_reader(BufReader::new(f)).map_err(|e| IndexError::io(&graph_tmp, e))?;
        (len, sum)
    };

    {
        let f = File::create(&meta_tmp).map_err(|e| IndexError::io(&meta_tmp, e))?;
        let mut w = SumWriter {
            inner: BufWriter::with_capacity(1 << 20, f),
            sum: Checksum::new(),
        };
        write_sidecar(&mut w, header, graph_len, graph_sum, membership, exact)
            .map_err(|e| IndexError::io(&meta_tmp, e))?;
        let total = w.sum.finish();
        w.inner
            .write_all(&total.to_le_bytes())
            .map_err(|e| IndexError::io(&meta_tmp, e))?;
        let f = w
            .inner
            .into_inner()
            .map_err(|e| IndexError::io(&meta_tmp, e.into_error()))?;
        f.sync_all().map_err(|e| IndexError::io(&meta_tmp, e))?;
    }

    fs::rename(&graph_tmp, &graph).map_err(|e| IndexError::io(&graph, e))?;
    fs::rename(&meta_tmp, &meta).map_err(|e| IndexError::io(&meta, e))?;
    // Directory fsync makes the renames durable; not all filesystems allow it, and the
    // data itself is already synced, so a refusal is not an error.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn write_sidecar(
    w: &mut impl Write,
    h: &Header,
    graph_len: u64,
    graph_sum: u64,
    membership: &Membership,
    exact: Option<&ExactStore>,
) -> std::io::Result<()> {
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&(h.shard as u32).to_le_bytes())?;
    w.write_all(&(h.shards as u32).to_le_bytes())?;
    w.write_all(&(h.dims as u32).to_le_bytes())?;
    w.write_all(&[h.scalar.tag(), exact.is_some() as u8, h.kind.tag()])?;
    w.write_all(&h.position.to_le_bytes())?;
    let ms = h
        .written_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    w.write_all(&ms.to_le_bytes())?;
    w.write_all(&graph_len.to_le_bytes())?;
    w.write_all(&graph_sum.to_le_bytes())?;
    w.write_all(&h.faces.to_le_bytes())?;

    w.write_all(&(membership.names().len() as u32).to_le_bytes())?;
    for n in membership.names() {
        w.write_all(&(n.len() as u32).to_le_bytes())?;
        w.write_all(n.as_bytes())?;
    }
    w.write_all(&(membership.face_count() as u64).to_le_bytes())?;
    for (face, gs) in membership.faces() {
        w.write_all(&face.to_le_bytes())?;
        w.write_all(&(gs.len() as u16).to_le_bytes())?;
        for g in gs {
            w.write_all(&g.to_le_bytes())?;
        }
    }
    match exact {
        None => w.write_all(&0u64.to_le_bytes())?,
        Some(x) => {
            w.write_all(&(x.len() as u64).to_le_bytes())?;
            let mut bytes = Vec::with_capacity(h.dims * 4);
            for (face, v) in x.iter() {
                w.write_all(&face.to_le_bytes())?;
                bytes.clear();
                for c in v {
                    bytes.extend_from_slice(&c.to_le_bytes());
                }
                w.write_all(&bytes)?;
            }
        }
    }
    Ok(())
}

/// Reads and fully validates a sidecar and the checksum of its graph file. Every failure is
/// `IndexError::Snapshot` (rebuild this shard) except a missing sidecar, which is
/// `IndexError::NoSnapshot`: same code and same remedy, but expected on a first start.
pub fn read(
    dir: &Path,
    shard: usize,
    shards: usize,
    dims: usize,
    scalar: Scalar,
    kind: IndexKind,
) -> Result<Sidecar> {
    let meta = meta_path(dir, shard);
    let bad = |reason: String| IndexError::Snapshot {
        shard,
        path: meta.clone(),
        reason,
    };
    let f = File::open(&meta).map_err(|e| match e.kind() {
        // No sidecar at all: a shard never saved, which its caller treats as expected.
        std::io::ErrorKind::NotFound => IndexError::NoSnapshot { shard, path: meta.clone() },
        _ => bad(format!("cannot open: {e}")),
    })?;
    let mut r = SumReader {
        inner: BufReader::with_capacity(1 << 20, f),
        sum: Checksum::new(),
    };
    let io = |e: std::io::Error| bad(format!("truncated or unreadable: {e}"));

    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(io)?;
    if &magic != MAGIC {
        return Err(bad("not a shard snapshot".into()));
    }
    let version = r.u32().map_err(io)?;
    if version != VERSION && version != 1 {
        return Err(bad(format!("format version {version}, expected {VERSION}")));
    }
    let (s_shard, s_shards, s_dims) = (
        r.u32().map_err(io)?,
        r.u32().map_err(io)?,
        r.u32().map_err(io)?,
    );
    if (s_shard as usize, s_shards as usize) != (shard, shards) {
        return Err(bad(format!(
            "written as shard {s_shard} of {s_shards}, expected {shard} of {shards}"
        )));
    }
    if s_dims as usize != dims {
        return Err(bad(format!("{s_dims} dimensions, expected {dims}")));
    }
    let mut tags = [0u8; 2];
    r.read_exact(&mut tags).map_err(io)?;
    let s_kind = if version == 1 {
        IndexKind::Hnsw
    } else {
        let mut tag = [0u8; 1];
        r.read_exact(&mut tag).map_err(io)?;
        IndexKind::from_tag(tag[0]).ok_or_else(|| bad("unknown index kind".into()))?
    };
    if s_kind.tag() != kind.tag() {
        return Err(bad(format!("holds a {} index, expected {}", s_kind.as_str(), kind.as_str())));
    }
    let s_scalar = Scalar::from_tag(tags[0]).ok_or_else(|| bad("unknown scalar kind".into()))?;
    if s_scalar != scalar {
        return Err(bad(format!(
            "stores {}, expected {}",
            s_scalar.as_str(),
            scalar.as_str()
        )));
    }
    let position = r.u64().map_err(io)?;
    let written_at = UNIX_EPOCH + Duration::from_millis(r.u64().map_err(io)?);
    let graph_len = r.u64().map_err(io)?;
    let graph_sum = r.u64().map_err(io)?;
    let faces = r.u64().map_err(io)?;

    let n_names = r.u32().map_err(io)? as usize;
    let mut names = Vec::with_capacity(n_names.min(1 << 16));
    for _ in 0..n_names {
        let len = r.u32().map_err(io)? as usize;
        if len > 1 << 20 {
            return Err(bad("implausible gallery name length".into()));
        }
        let mut b = vec![0u8; len];
        r.read_exact(&mut b).map_err(io)?;
        names.push(String::from_utf8(b).map_err(|_| bad("gallery name is not UTF-8".into()))?);
    }
    let n_members = r.u64().map_err(io)?;
    let mut members = Vec::with_capacity(n_members.min(faces) as usize);
    for _ in 0..n_members {
        let face = r.u64().map_err(io)?;
        let n = r.u16().map_err(io)? as usize;
        let mut gs = Vec::with_capacity(n);
        for _ in 0..n {
            gs.push(r.u32().map_err(io)?);
        }
        members.push((face, gs));
    }
    let n_exact = r.u64().map_err(io)?;
    let exact = if tags[1] == 0 {
        None
    } else {
        let mut x = ExactStore::new(dims);
        x.reserve(n_exact.min(faces) as usize);
        let mut bytes = vec![0u8; dims * 4];
        let mut v = vec![0f32; dims];
        for _ in 0..n_exact {
            let face = r.u64().map_err(io)?;
            r.read_exact(&mut bytes).map_err(io)?;
            for (c, b) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                *c = f32::from_le_bytes(b.try_into().unwrap());
            }
            x.put(face, &v);
        }
        Some(x)
    };
    let computed = r.sum.finish();
    let mut stored = [0u8; 8];
    r.inner.read_exact(&mut stored).map_err(io)?;
    if u64::from_le_bytes(stored) != computed {
        return Err(bad("sidecar checksum mismatch".into()));
    }
    let mut extra = [0u8; 1];
    if r.inner.read(&mut extra).map_err(io)? != 0 {
        return Err(bad("trailing bytes after checksum".into()));
    }
    if exact.as_ref().is_some_and(|x| x.len() as u64 != faces) {
        return Err(bad("exact vector count does not match face count".into()));
    }
    let membership = Membership::restore(names, members)
        .ok_or_else(|| bad("inconsistent gallery table".into()))?;

    let graph = data_path(dir, shard, kind);
    let gbad = |reason: String| IndexError::Snapshot {
        shard,
        path: graph.clone(),
        reason,
    };
    let g = File::open(&graph).map_err(|e| gbad(format!("cannot open: {e}")))?;
    let len = g.metadata().map_err(|e| gbad(e.to_string()))?.len();
    if len != graph_len {
        return Err(gbad(format!("{len} bytes, sidecar says {graph_len}")));
    }
    if Checksum::of_reader(BufReader::with_capacity(1 << 20, g)).map_err(|e| gbad(e.to_string()))?
        != graph_sum
    {
        return Err(gbad("graph checksum mismatch".into()));
    }

    Ok(Sidecar {
        header: Header {
            shard,
            shards,
            dims,
            scalar,
            kind: s_kind,
            position,
            written_at,
            faces,
        },
        membership,
        exact,
    })
}

struct SumWriter<W: Write> {
    inner: W,
    sum: Checksum,
}

impl<W: Write> Write for SumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sum.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct SumReader<R: Read> {
    inner: R,
    sum: Checksum,
}

impl<R: Read> Read for SumReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sum.update(&buf[..n]);
        Ok(n)
    }
}

impl<R: Read> SumReader<R> {
    fn u16(&mut self) -> std::io::Result<u16> {
        let mut b = [0u8; 2];
        self.read_exact(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> std::io::Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}
