/**
 * The OpenTelemetry settings, from the standard `OTEL_*` variables (read by
 * `parseConfig`, like every other setting). Traces are off unless an OTLP endpoint
 * is named (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) or
 * `OTEL_TRACES_EXPORTER=otlp` is set explicitly (then the spec's default endpoint,
 * `http://localhost:4318/v1/traces`); `OTEL_SDK_DISABLED=true` or
 * `OTEL_TRACES_EXPORTER=none` turn them off whatever else is set. A value the SDK
 * would only warn about stops the start here, like any bad setting.
 */

export type OtlpProtocol = "http/protobuf" | "http/json";
export type SamplerName = "always_on" | "always_off" | "traceidratio" | "parentbased_always_on" | "parentbased_always_off" | "parentbased_traceidratio";

export interface TracesConfig {
  /** The full URL spans are posted to (`.../v1/traces`). */
  url: string;
  protocol: OtlpProtocol;
  /** Sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`, then `..._TRACES_HEADERS` over it): often a back end's API key, so never logged. */
  headers: Record<string, string>;
  timeoutMs?: number;
  compression?: "gzip" | "none";
  /** The resource: `service.name` (`OTEL_SERVICE_NAME`, default `svc`) and `OTEL_RESOURCE_ATTRIBUTES`. */
  resource: Record<string, string>;
  sampler: { name: SamplerName; ratio: number };
  /** The batch span processor (`OTEL_BSP_*`); unset: the SDK's defaults (5 s, 512 a batch, 2048 queued, 30 s). */
  batch: { scheduledDelayMillis?: number; maxExportBatchSize?: number; maxQueueSize?: number; exportTimeoutMillis?: number };
}

export interface TelemetryConfig {
  /** null: no traces (the OpenTelemetry API's no-op tracer, nothing loaded). */
  traces: TracesConfig | null;
  /** `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`: prompts, outputs and tool arguments go into spans (bounded); otherwise never. */
  captureContent: boolean;
}

const DEFAULT_TRACES_URL = "http://localhost:4318/v1/traces";
const SAMPLERS: SamplerName[] = ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"];

/** Parses the `OTEL_*` variables of `env` (empty values already dropped); a problem is added to `problems`, in the words `ConfigError` prints. */
export function parseTelemetry(env: Record<string, string | undefined>, problems: string[]): TelemetryConfig {
  const bool = (name: string): boolean => {
    const v = env[name];
    if (v === undefined) return false;
    if (/^true$/i.test(v.trim())) return true;
    if (/^false$/i.test(v.trim())) return false;
    problems.push(`${name}: must be true or false (got ${JSON.stringify(v)})`);
    return false;
  };
  const positive = (name: string): number | undefined => {
    const v = env[name];
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) {
      problems.push(`${name}: must be a whole number above 0 (got ${JSON.stringify(v)})`);
      return undefined;
    }
    return n;
  };
  const captureContent = bool("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
  const disabled = bool("OTEL_SDK_DISABLED");

  const exporters = (env.OTEL_TRACES_EXPORTER ?? "").split(",").map((e) => e.trim().toLowerCase()).filter(Boolean);
  for (const e of exporters) if (e !== "otlp" && e !== "none") problems.push(`OTEL_TRACES_EXPORTER: only otlp or none are supported (got ${JSON.stringify(env.OTEL_TRACES_EXPORTER)})`);

  const url = tracesUrl(env, problems);
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? "http/protobuf";
  const protocolVar = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL !== undefined ? "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" : "OTEL_EXPORTER_OTLP_PROTOCOL";
  if (protocol !== "http/protobuf" && protocol !== "http/json") {
    problems.push(`${protocolVar}: http/protobuf or http/json (got ${JSON.stringify(protocol)}${protocol === "grpc" ? "; gRPC is not shipped: point it at the collector's OTLP/HTTP port, 4318" : ""})`);
  }
  const headers = { ...keyPairs(env, "OTEL_EXPORTER_OTLP_HEADERS", problems, true), ...keyPairs(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", problems, true) };
  const timeoutMs = positive("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") ?? positive("OTEL_EXPORTER_OTLP_TIMEOUT");
  const compressionVar = env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION !== undefined ? "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION" : "OTEL_EXPORTER_OTLP_COMPRESSION";
  const compression = env[compressionVar];
  if (compression !== undefined && compression !== "gzip" && compression !== "none") problems.push(`${compressionVar}: gzip or none (got ${JSON.stringify(compression)})`);

  const resource = keyPairs(env, "OTEL_RESOURCE_ATTRIBUTES", problems, false);
  resource["service.name"] = env.OTEL_SERVICE_NAME ?? resource["service.name"] ?? "svc";

  const samplerName = (env.OTEL_TRACES_SAMPLER ?? "parentbased_always_on") as SamplerName;
  if (!SAMPLERS.includes(samplerName)) problems.push(`OTEL_TRACES_SAMPLER: one of ${SAMPLERS.join(", ")} (got ${JSON.stringify(env.OTEL_TRACES_SAMPLER)})`);
  let ratio = 1;
  if (samplerName.endsWith("traceidratio") && env.OTEL_TRACES_SAMPLER_ARG !== undefined) {
    ratio = Number(env.OTEL_TRACES_SAMPLER_ARG);
    if (!(ratio >= 0 && ratio <= 1)) problems.push(`OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1 (got ${JSON.stringify(env.OTEL_TRACES_SAMPLER_ARG)})`);
  }
  const batch = {
    scheduledDelayMillis: positive("OTEL_BSP_SCHEDULE_DELAY"),
    maxExportBatchSize: positive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
    maxQueueSize: positive("OTEL_BSP_MAX_QUEUE_SIZE"),
    exportTimeoutMillis: positive("OTEL_BSP_EXPORT_TIMEOUT"),
  };
  if (batch.maxExportBatchSize && batch.maxExportBatchSize > (batch.maxQueueSize ?? 2048)) problems.push("OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must not be above OTEL_BSP_MAX_QUEUE_SIZE (2048 by default)");

  const on = !disabled && !exporters.includes("none") && (url !== null || exporters.includes("otlp"));
  return {
    captureContent,
    traces: on
      ? {
          url: url ?? DEFAULT_TRACES_URL,
          protocol: protocol as OtlpProtocol,
          headers,
          ...(timeoutMs ? { timeoutMs } : {}),
          ...(compression ? { compression: compression as "gzip" | "none" } : {}),
          resource,
          sampler: { name: samplerName, ratio },
          batch: Object.fromEntries(Object.entries(batch).filter(([, v]) => v !== undefined)),
        }
      : null,
  };
}

/** The signal's own endpoint as given, else the general one with `/v1/traces` appended (as the OTLP exporter spec says); null: neither is set. */
function tracesUrl(env: Record<string, string | undefined>, problems: string[]): string | null {
  const check = (name: string, value: string): string | null => {
    try {
      const u = new URL(value);
      if (u.protocol === "http:" || u.protocol === "https:") return u.toString();
    } catch {
      // said below
    }
    problems.push(`${name}: must be an http:// or https:// URL (got ${JSON.stringify(value)})`);
    return null;
  };
  const own = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (own !== undefined) return check("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", own);
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (base === undefined) return null;
  const ok = check("OTEL_EXPORTER_OTLP_ENDPOINT", base);
  return ok && `${base.replace(/\/+$/, "")}/v1/traces`;
}

/**
 * `key1=value1,key2=value2` (W3C baggage-like, values percent-encoded), as the OTLP
 * header and resource variables are written. `secret`: a bad entry is named by its
 * position only (headers carry credentials; no value is ever echoed).
 */
function keyPairs(env: Record<string, string | undefined>, name: string, problems: string[], secret: boolean): Record<string, string> {
  const raw = env[name];
  const out: Record<string, string> = {};
  if (raw === undefined) return out;
  raw.split(",").forEach((entry, i) => {
    if (!entry.trim()) return;
    const eq = entry.indexOf("=");
    const key = eq > 0 ? entry.slice(0, eq).trim() : "";
    let value: string | null = null;
    try {
      value = eq > 0 ? decodeURIComponent(entry.slice(eq + 1).trim()) : null;
    } catch {
      value = null;
    }
    if (!key || value === null) {
      problems.push(`${name}: entry ${i + 1} is not key=value (percent-encoded)${secret ? "" : ` (got ${JSON.stringify(entry)})`}`);
      return;
    }
    out[key] = value;
  });
  return out;
}
