// Minimal protocol-buffers wire format: a writer just big enough to serialise ONNX
// messages (field order follows call order; readers accept any order), and a reader
// that keeps every field it does not interpret, so that editing a few fields of a
// foreign ONNX file re-encodes everything else byte for byte.

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

/** One field as it stood on the wire. */
export interface WireField {
  field: number;
  wire: number;
  /** The whole field, tag included: re-encoding an untouched field copies these bytes. */
  raw: Uint8Array;
  /** Varint fields: the value (two's complement for negatives, as written). */
  value: bigint;
  /** Length-delimited and fixed-size fields: the value bytes, a view into the source. */
  payload: Uint8Array;
}

function readVarint(buf: Uint8Array, pos: number): { value: bigint; end: number } {
  let value = 0n;
  for (let shift = 0n; ; shift += 7n) {
    if (pos >= buf.length) throw new Error('protobuf: truncated varint');
    if (shift > 63n) throw new Error('protobuf: varint longer than 10 bytes');
    const b = buf[pos++];
    value |= BigInt(b & 0x7f) << shift;
    if (b < 0x80) return { value: value & (TWO_POW_64 - 1n), end: pos };
  }
}

/**
 * A decoded message: its fields in wire order. Submessages stay undecoded until asked
 * for, and edits build a new message, so the source bytes are never modified.
 */
export class ProtoMessage {
  constructor(readonly fields: readonly WireField[]) {}

  static decode(buf: Uint8Array): ProtoMessage {
    const fields: WireField[] = [];
    let pos = 0;
    while (pos < buf.length) {
      const start = pos;
      const tag = readVarint(buf, pos);
      pos = tag.end;
      const field = Number(tag.value >> 3n);
      const wire = Number(tag.value & 7n);
      let value = 0n;
      let payload = buf.subarray(pos, pos);
      if (wire === WireType.Varint) {
        ({ value, end: pos } = readVarint(buf, pos));
      } else {
        let length: number;
        if (wire === WireType.LengthDelimited) {
          const len = readVarint(buf, pos);
          pos = len.end;
          length = Number(len.value);
        } else if (wire === WireType.Fixed32 || wire === WireType.Fixed64) {
          length = wire === WireType.Fixed32 ? 4 : 8;
        } else {
          throw new Error(`protobuf: unsupported wire type ${wire} (field ${field})`);
        }
        if (pos + length > buf.length) throw new Error(`protobuf: field ${field} runs past the end`);
        payload = buf.subarray(pos, pos + length);
        pos += length;
      }
      if (field < 1) throw new Error('protobuf: field number 0');
      fields.push({ field, wire, raw: buf.subarray(start, pos), value, payload });
    }
    return new ProtoMessage(fields);
  }

  encode(): Uint8Array {
    const out = new Uint8Array(this.fields.reduce((n, f) => n + f.raw.byteLength, 0));
    let offset = 0;
    for (const f of this.fields) {
      out.set(f.raw, offset);
      offset += f.raw.byteLength;
    }
    return out;
  }

  all(field: number): WireField[] {
    return this.fields.filter((f) => f.field === field);
  }

  /** A singular field: proto readers let the last occurrence win. */
  last(field: number): WireField | undefined {
    for (let i = this.fields.length - 1; i >= 0; i--) if (this.fields[i].field === field) return this.fields[i];
    return undefined;
  }

  /** int32/int64/enum/bool, sign restored from the 64-bit two's complement. */
  int(field: number): number | undefined {
    const f = this.last(field);
    return f === undefined ? undefined : Number(BigInt.asIntN(64, f.value));
  }

  string(field: number): string | undefined {
    const f = this.last(field);
    return f === undefined ? undefined : new TextDecoder().decode(f.payload);
  }

  strings(field: number): string[] {
    return this.all(field).map((f) => new TextDecoder().decode(f.payload));
  }

  message(field: number): ProtoMessage | undefined {
    const f = this.last(field);
    return f === undefined ? undefined : ProtoMessage.decode(f.payload);
  }

  messages(field: number): ProtoMessage[] {
    return this.all(field).map((f) => ProtoMessage.decode(f.payload));
  }

  /** A repeated int32/int64 field; writers may pack it or not, readers must accept both. */
  ints(field: number): number[] {
    const out: number[] = [];
    for (const f of this.all(field)) {
      if (f.wire === WireType.Varint) {
        out.push(Number(BigInt.asIntN(64, f.value)));
        continue;
      }
      for (let pos = 0; pos < f.payload.length; ) {
        const v = readVarint(f.payload, pos);
        out.push(Number(BigInt.asIntN(64, v.value)));
        pos = v.end;
      }
    }
    return out;
  }

  /** A repeated float field, packed or not. */
  floats(field: number): number[] {
    const out: number[] = [];
    for (const f of this.all(field)) {
      const view = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.byteLength);
      for (let pos = 0; pos + 4 <= f.payload.length; pos += 4) out.push(view.getFloat32(pos, true));
    }
    return out;
  }

  /** The same message with every occurrence of these fields left out. */
  without(...fieldNumbers: number[]): ProtoMessage {
    return new ProtoMessage(this.fields.filter((f) => !fieldNumbers.includes(f.field)));
  }

  /** The same message with the fields `writer` holds appended. */
  with(writer: ProtoWriter): ProtoMessage {
    return new ProtoMessage([...this.fields, ...ProtoMessage.decode(writer.finish()).fields]);
  }
}
