import type { TestServer } from "./server.js";

/** JSON calls against a test server with one credential: `{status, body}` whatever the status. */
export function apiClient(server: Pick<TestServer, "fetch">, token: string, headers: () => Record<string, string> = () => ({})) {
  return async <T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T; headers: Headers }> => {
    const res = await server.fetch(path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...headers(), ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* an event stream or empty body stays text */
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  };
}
