/**
 * How an embedding is kept in a `bytea` column: `dim` float32 values,
 * little-endian, one after the other. Shared by the face rows, the change-log
 * reader and re-embedding, so it lives apart from all three; the search
 * tier's shard wire (search/shard-wire.ts) sends query embeddings in it too.
 */

export function floatsToBytes(v: Float32Array): Buffer {
  const out = Buffer.allocUnsafe(v.length * 4);
  for (let i = 0; i < v.length; i++) out.writeFloatLE(v[i], i * 4);
  return out;
}

export function bytesToFloats(b: Buffer): Float32Array {
  const out = new Float32Array(b.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = b.readFloatLE(i * 4);
  return out;
}
