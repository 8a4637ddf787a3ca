// Minimal protocol-buffers wire-format writer: just enough to serialise ONNX
// messages. Field order follows call order; readers accept any order.

const enum WireType {
  Varint = 0,
  Fixed64 = 1,
  LengthDelimited = 2,
  Fixed32 = 5,
}

const TWO_POW_64 = 1n << 64n;

export class ProtoWriter {
  private chunks: Uint8Array[] = [];
  private scratch: number[] = [];
  private size = 0;

  get byteLength(): number {
    this.flushScratch();
    return this.size;
  }

  /** int32/int64/enum/bool; negatives use 10-byte two's complement as proto requires. */
  varint(field: number, value: number | bigint): this {
    this.tag(field, WireType.Varint);
    this.rawVarint(value);
    return this;
  }

  float(field: number, value: number): this {
    this.tag(field, WireType.Fixed32);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, value, true);
    this.push(b);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.tag(field, WireType.LengthDelimited);
    this.rawVarint(value.byteLength);
    this.push(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, new TextEncoder().encode(value));
  }

  message(field: number, value: ProtoWriter): this {
    return this.bytes(field, value.finish());
  }

  /** Packed encoding is valid for repeated scalars in both proto2 ([packed=true]) and proto3 readers. */
  packedVarints(field: number, values: readonly (number | bigint)[]): this {
    const inner = new ProtoWriter();
    for (const v of values) inner.rawVarint(v);
    return this.bytes(field, inner.finish());
  }

  packedFloats(field: number, values: readonly number[]): this {
    const b = new Uint8Array(values.length * 4);
    const view = new DataView(b.buffer);
    values.forEach((v, i) => view.setFloat32(i * 4, v, true));
    return this.bytes(field, b);
  }

  finish(): Uint8Array {
    this.flushScratch();
    if (this.chunks.length === 1) return this.chunks[0];
    const out = new Uint8Array(this.size);
    let offset = 0;
    for (const c of this.chunks) {
      out.set(c, offset);
      offset += c.byteLength;
    }
    this.chunks = [out];
    return out;
  }

  private tag(field: number, wire: WireType): void {
    if (!Number.isInteger(field) || field < 1) throw new Error(`invalid protobuf field number ${field}`);
    this.rawVarint(field * 8 + wire);
  }

  private rawVarint(value: number | bigint): void {
    let v = typeof value === 'bigint' ? value : BigInt(value);
    if (v < 0n) v += TWO_POW_64;
    if (v < 0n || v >= TWO_POW_64) throw new Error(`varint out of 64-bit range: ${value}`);
    do {
      const low = Number(v & 0x7fn);
      v >>= 7n;
      this.scratch.push(v > 0n ? low | 0x80 : low);
    } while (v > 0n);
  }

  private push(b: Uint8Array): void {
    this.flushScratch();
    this.chunks.push(b);
    this.size += b.byteLength;
  }

  // Small varints accumulate in a plain array so that a message with thousands of
  // tags does not allocate a typed array per tag.
  private flushScratch(): void {
    if (this.scratch.length === 0) return;
    this.chunks.push(Uint8Array.from(this.scratch));
    this.size += this.scratch.length;
    this.scratch = [];
  }
}
