import fs from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import zlib from "node:zlib";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";

/**
 * Every answer an in-process test server gives, checked against the committed openapi.json
 * with a standard validator (Ajv, JSON Schema 2020-12, the dialect of OpenAPI 3.1): its
 * status is declared for its operation, its content type is one the operation declares, its
 * JSON body (or each `text/event-stream` event's `data`) matches the schema declared; and
 * each request body the server accepted (a 2xx) matches the operation's request schema.
 * A mismatch is recorded; `openapi-check-setup.ts` fails the test during which it happened.
 * Paths the document does not describe (the dashboard, /docs, the worker's downloads) are
 * not API answers and are left alone.
 */

type Json = Record<string, any>;
const DOC_ID = "https://svc.invalid/openapi.json";
/** What is kept of a body to check: an answer larger than this is counted, not checked (an event stream is checked as it goes, whatever its length). */
const MAX_BODY = 1024 * 1024;

const contentTypeOf = (value: string) => value.split(";")[0].trim().toLowerCase();

export interface Mismatch {
  method: string;
  path: string;
  status: number;
  problem: string;
}

interface Operation {
  method: string;
  template: string;
  pattern: RegExp;
  op: Json;
}

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => void;

export class OpenApiCheck {
  readonly mismatches: Mismatch[] = [];
  readonly counts = { answers: 0, events: 0, requestBodies: 0 };
  private readonly ajv: Ajv2020;
  private readonly doc: Json;
  private readonly operations: Operation[];
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(text: string) {
    // Every `#/components/schemas/X` becomes a reference into one schema document holding them all as `$defs`.
    this.doc = JSON.parse(text.replaceAll('"#/components/schemas/', `"${DOC_ID}#/$defs/`)) as Json;
    this.ajv = new Ajv2020({ strict: false, allErrors: false, logger: false, validateFormats: true });
    addFormats(this.ajv);
    this.ajv.addSchema({ $id: DOC_ID, $defs: this.doc.components.schemas });
    this.operations = [];
    for (const [template, item] of Object.entries<Json>(this.doc.paths)) {
      const pattern = new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^}]+\}/g, "[^/]+")}$`);
      for (const method of ["get", "put", "post", "delete", "patch"]) if (item[method]) this.operations.push({ method: method.toUpperCase(), template, pattern, op: item[method] });
    }
  }

  /** Watches every request `server` answers from now on. */
  attach(server: Server): void {
    server.prependListener("request", (req: IncomingMessage, res: ServerResponse) => this.watch(req, res));
  }

  private watch(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? "/").split("?")[0];
    const o = this.operations.find((x) => x.method === req.method && x.pattern.test(path));
    if (!o) return;
    const fail = (problem: string) => this.mismatches.push({ method: o.method, path, status: res.statusCode, problem: `${o.method} ${o.template} ${res.statusCode}: ${problem}` });
    // Headers given to writeHead are not readable with getHeader: kept here.
    let headHeaders: Record<string, unknown> = {};
    const header = (name: string): string => {
      const set = res.getHeader(name) ?? Object.entries(headHeaders).find(([k]) => k.toLowerCase() === name)?.[1];
      return set === undefined ? "" : String(set);
    };
    /** A body is kept whole (up to MAX_BODY) to check at the end; an event stream is checked event by event as it is written, keeping only an unfinished event. */
    const chunks: Buffer[] = [];
    let size = 0;
    let stream: { pending: string; schema: Json | null } | null = null;
    const keep = (chunk: unknown, encoding?: unknown) => {
      if (chunk === undefined || chunk === null || typeof chunk === "function") return;
      const b = Buffer.isBuffer(chunk) ? chunk : typeof chunk === "string" ? Buffer.from(chunk, typeof encoding === "string" ? (encoding as BufferEncoding) : "utf8") : Buffer.from(chunk as Uint8Array);
      if (stream === null && contentTypeOf(header("content-type")) === "text/event-stream" && !header("content-encoding")) {
        stream = { pending: "", schema: this.mediaOf(o, res.statusCode, "text/event-stream")?.schema ?? null };
      }
      if (stream) {
        stream.pending += b.toString("utf8");
        const end = stream.pending.lastIndexOf("\n\n");
        if (end < 0) return;
        const complete = stream.pending.slice(0, end + 2);
        stream.pending = stream.pending.slice(end + 2);
        if (stream.schema) this.events(complete, stream.schema, fail);
        return;
      }
      size += b.length;
      if (size <= MAX_BODY) chunks.push(b);
      else chunks.length = 0;
    };
    const writeHead = res.writeHead;
    const write = res.write;
    const end = res.end;
    res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
      for (const a of args.slice(1)) if (a && typeof a === "object" && !Array.isArray(a)) headHeaders = a as Record<string, unknown>;
      return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as typeof res.writeHead;
    res.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
      keep(chunk, rest[0]);
      return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
    } as typeof res.write;
    res.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
      keep(chunk, rest[0]);
      return (end as (...a: unknown[]) => ServerResponse).call(this, chunk, ...rest);
    } as typeof res.end;
    res.once("close", () => {
      try {
        this.check(o, req, res, { contentType: contentTypeOf(header("content-type")), encoding: header("content-encoding"), body: stream ? "stream" : size > MAX_BODY ? null : Buffer.concat(chunks) }, fail);
      } catch (err) {
        fail(`the check itself failed: ${(err as Error).message}`);
      }
    });
  }

  /** The declared answer of an operation with this status (its `$ref` resolved), if any. */
  private responseOf(o: Operation, status: number): Json | undefined {
    const declared = o.op.responses?.[String(status)] ?? o.op.responses?.default;
    return declared?.$ref ? this.resolve(declared.$ref) : declared;
  }

  /** The declared media of an operation's answer with this status and content type. */
  private mediaOf(o: Operation, status: number, contentType: string): Json | undefined {
    return this.responseOf(o, status)?.content?.[contentType];
  }

  /** Each whole event of `text` (ending with a blank line), its `data` checked against `schema`. */
  private events(text: string, schema: Json, fail: (problem: string) => void): void {
    for (const block of text.split(/\n\n/)) {
      const data = block
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data || data === "[DONE]") continue;
      this.counts.events++;
      let value: unknown;
      try {
        value = JSON.parse(data);
      } catch {
        fail(`an event whose data is not JSON: ${data.slice(0, 200)}`);
        continue;
      }
      this.validate(schema, value, fail, "an event");
    }
  }

  private check(o: Operation, req: IncomingMessage, res: ServerResponse, answer: { contentType: string; encoding: string; body: Buffer | "stream" | null }, fail: (problem: string) => void): void {
    // Only what was answered: a connection the client dropped before the head was sent has no answer to check.
    if (!res.headersSent) return;
    const status = res.statusCode;
    this.counts.answers++;
    const response = this.responseOf(o, status);
    if (!response) return void fail(`status ${status} is not declared (declared: ${Object.keys(o.op.responses ?? {}).join(", ")})`);
    const { contentType } = answer;
    const body = answer.body === null || answer.body === "stream" ? answer.body : decode(answer.body, answer.encoding);
    if (!response.content) {
      // A redirect's little text body (Express's "Found. Redirecting to ...") is not the API's answer.
      if (Buffer.isBuffer(body) && body.length && !(status >= 300 && status < 400)) fail(`a ${contentType || "typeless"} body where none is declared: ${body.subarray(0, 120)}`);
      return;
    }
    if (Buffer.isBuffer(body) && body.length === 0 && (status === 204 || status === 304)) return;
    const media = response.content[contentType];
    if (!media) return void fail(`content type ${contentType || "(none)"} is not declared (declared: ${Object.keys(response.content).join(", ")})`);
    if (Buffer.isBuffer(body)) {
      const schema = media.schema;
      if (contentType === "application/json") {
        let value: unknown;
        try {
          value = JSON.parse(body.toString("utf8"));
        } catch {
          return void fail(`the body is not JSON: ${body.subarray(0, 200)}`);
        }
        this.validate(schema, value, fail, "the body");
      } else if (contentType === "text/event-stream") {
        // A compressed stream, checked whole at its end (whole events only: a stream the client left ends with a part of one).
        const text = body.toString("utf8");
        this.events(text.slice(0, text.lastIndexOf("\n\n") + 2), schema, fail);
      } else if (schema && schema.type !== "string") {
        fail(`a ${contentType} body declared as ${JSON.stringify(schema).slice(0, 100)}`);
      }
    }

    // A request body the server took (a 2xx) must be one the document allows: a validating client or gateway would refuse it otherwise.
    const requestMedia = o.op.requestBody?.content?.["application/json"];
    const sent = (req as IncomingMessage & { body?: unknown }).body;
    if (status >= 200 && status < 300 && requestMedia && sent !== undefined && !(typeof sent === "object" && sent !== null && Object.keys(sent).length === 0 && !o.op.requestBody.required)) {
      this.counts.requestBodies++;
      this.validate(requestMedia.schema, sent, fail, "the request body");
    }
  }

  private validate(schema: Json, value: unknown, fail: (problem: string) => void, what: string): void {
    const key = JSON.stringify(schema);
    let v = this.compiled.get(key);
    if (!v) this.compiled.set(key, (v = this.ajv.compile(schema)));
    if (!v(value)) {
      const e = v.errors?.[0];
      fail(`${what} does not match: ${e?.instancePath || "/"} ${e?.message} (${e?.schemaPath}); ${JSON.stringify(value).slice(0, 300)}`);
    }
  }

  private resolve(ref: string): Json {
    return ref
      .replace(/^#\//, "")
      .split("/")
      .reduce((at: Json, k) => at[k], this.doc);
  }
}

function decode(raw: Buffer, encoding: string): Buffer {
  try {
    if (encoding === "gzip") return zlib.gunzipSync(raw, { finishFlush: zlib.constants.Z_SYNC_FLUSH });
    if (encoding === "br") return zlib.brotliDecompressSync(raw, { finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH });
    if (encoding === "deflate") return zlib.inflateSync(raw, { finishFlush: zlib.constants.Z_SYNC_FLUSH });
  } catch {
    return Buffer.alloc(0);
  }
  return raw;
}

let shared: OpenApiCheck | null = null;
/** The check of this test process, against the committed openapi.json (read once). */
export function openApiCheck(): OpenApiCheck {
  shared ??= new OpenApiCheck(fs.readFileSync(new URL("../../openapi.json", import.meta.url), "utf8"));
  return shared;
}
/** The check, if a server of this process is watched. */
openApiCheck.peek = (): OpenApiCheck | null => shared;

/** What the check found since last asked, as the error that fails the test (openapi-check-setup.ts); null: nothing. */
export function takeMismatches(check: OpenApiCheck | null): Error | null {
  const found = check?.mismatches.splice(0) ?? [];
  return found.length ? new Error(`answers that do not match openapi.json:\n${found.map((m) => `  ${m.problem}`).join("\n")}`) : null;
}
