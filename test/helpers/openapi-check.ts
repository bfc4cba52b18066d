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
/** What is kept of a body to check: an answer larger than this is counted, not checked. */
const MAX_BODY = 4 * 1024 * 1024;

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
    const operation = this.operations.find((o) => o.method === req.method && o.pattern.test(path));
    if (!operation) return;
    const chunks: Buffer[] = [];
    let size = 0;
    const keep = (chunk: unknown, encoding?: unknown) => {
      if (chunk === undefined || chunk === null || typeof chunk === "function") return;
      const b = Buffer.isBuffer(chunk) ? chunk : typeof chunk === "string" ? Buffer.from(chunk, typeof encoding === "string" ? (encoding as BufferEncoding) : "utf8") : Buffer.from(chunk as Uint8Array);
      size += b.length;
      if (size <= MAX_BODY) chunks.push(b);
    };
    const write = res.write;
    const end = res.end;
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
        this.check(operation, req, res, size > MAX_BODY ? null : Buffer.concat(chunks), path);
      } catch (err) {
        this.mismatches.push({ method: operation.method, path, status: res.statusCode, problem: `the check itself failed: ${(err as Error).message}` });
      }
    });
  }

  private check(o: Operation, req: IncomingMessage, res: ServerResponse, raw: Buffer | null, path: string): void {
    // Only what was answered: a connection the client dropped before the head was sent has no answer to check.
    if (!res.headersSent) return;
    const status = res.statusCode;
    const where = { method: o.method, path, status };
    const fail = (problem: string) => this.mismatches.push({ ...where, problem: `${o.method} ${o.template} ${status}: ${problem}` });
    this.counts.answers++;
    const declared = o.op.responses?.[String(status)] ?? o.op.responses?.default;
    if (!declared) return void fail(`status ${status} is not declared (declared: ${Object.keys(o.op.responses ?? {}).join(", ")})`);
    const response = declared.$ref ? this.resolve(declared.$ref) : declared;
    const contentType = String(res.getHeader("content-type") ?? "").split(";")[0].trim().toLowerCase();
    const body = raw === null ? null : decode(raw, String(res.getHeader("content-encoding") ?? ""));
    if (!response.content) {
      // A redirect's little text body (Express's "Found. Redirecting to ...") is not the API's answer.
      if (body && body.length && !(status >= 300 && status < 400)) fail(`a ${contentType || "typeless"} body where none is declared: ${body.subarray(0, 120)}`);
      return;
    }
    if (body !== null && body.length === 0 && (status === 204 || status === 304)) return;
    const media = response.content[contentType];
    if (!media) return void fail(`content type ${contentType || "(none)"} is not declared (declared: ${Object.keys(response.content).join(", ")})`);
    if (body === null) return;
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
      // Whole events only (a stream the client left mid-event ends with a part of one).
      const text = body.toString("utf8");
      const complete = text.slice(0, text.lastIndexOf("\n\n") + 2);
      for (const block of complete.split(/\n\n/)) {
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
    } else if (schema && schema.type !== "string") {
      fail(`a ${contentType} body declared as ${JSON.stringify(schema).slice(0, 100)}`);
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
