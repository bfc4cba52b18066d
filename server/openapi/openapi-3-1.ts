type Json = Record<string, any>;

/**
 * The document as OpenAPI 3.1 (its schemas JSON Schema 2020-12), from the 3.0 one
 * @ts-rest/open-api and @anatine/zod-openapi build, in one pass over every schema, so a
 * whole class of construct is right everywhere or nowhere (docs/contributors/decisions.md):
 *
 * - `nullable: true` becomes null in the type (`type: ["object", "null"]`), or, beside a
 *   `$ref` (a named schema made nullable where it is used) or a union, a branch
 *   `{type: "null"}` of an `anyOf`. In 3.0.3 `nullable` beside `allOf: [$ref]` widens only
 *   its own object's type, so validators refused the nulls the server sends;
 * - `oneOf` without a `discriminator` becomes `anyOf`: zod's unions take the first branch
 *   that parses (anyOf), and a catch-all branch would make a `oneOf` refuse what two
 *   branches match. Discriminated unions keep `oneOf` and their mapping;
 * - `exclusiveMinimum: true` / `exclusiveMaximum: true` (3.0's booleans) become the bound
 *   itself (2020-12's numbers);
 * - a schema's `example` becomes `examples: [example]` (3.1 deprecates the former).
 */
export function toOpenApi31(doc: Json): Json {
  doc.openapi = "3.1.0";
  for (const op of operations(doc)) {
    for (const p of op.parameters ?? []) if (p.schema) p.schema = convert(p.schema);
    for (const media of Object.values<Json>(op.requestBody?.content ?? {})) if (media.schema) media.schema = convert(media.schema);
    for (const r of Object.values<Json>(op.responses ?? {})) response(r);
  }
  const c = doc.components ?? {};
  for (const name of Object.keys(c.schemas ?? {})) c.schemas[name] = convert(c.schemas[name]);
  for (const r of Object.values<Json>(c.responses ?? {})) response(r);
  for (const h of Object.values<Json>(c.headers ?? {})) if (h.schema) h.schema = convert(h.schema);
  for (const p of Object.values<Json>(c.parameters ?? {})) if (p.schema) p.schema = convert(p.schema);
  return doc;
}

function response(r: Json): void {
  for (const media of Object.values<Json>(r.content ?? {})) if (media.schema) media.schema = convert(media.schema);
  for (const h of Object.values<Json>(r.headers ?? {})) if (h.schema) h.schema = convert(h.schema);
}

function* operations(doc: Json): Generator<Json> {
  for (const item of Object.values<Json>(doc.paths ?? {})) {
    for (const method of ["get", "put", "post", "delete", "patch", "head", "options", "trace"]) if (item[method]) yield item[method];
  }
}

/** One schema and everything inside it, converted. */
function convert(input: Json): Json {
  if (!input || typeof input !== "object" || input.$ref) return input;
  let s: Json = { ...input };
  for (const key of ["properties", "patternProperties"] as const) {
    if (s[key]) s[key] = Object.fromEntries(Object.entries<Json>(s[key]).map(([k, v]) => [k, convert(v)]));
  }
  for (const key of ["items", "additionalProperties", "not"] as const) if (s[key] && typeof s[key] === "object") s[key] = convert(s[key]);
  for (const key of ["oneOf", "anyOf", "allOf"] as const) if (Array.isArray(s[key])) s[key] = s[key].map(convert);

  if (s.oneOf && !s.discriminator) {
    s.anyOf = s.oneOf;
    delete s.oneOf;
  }
  if (s.exclusiveMinimum === true) ((s.exclusiveMinimum = s.minimum), delete s.minimum);
  else if (s.exclusiveMinimum === false) delete s.exclusiveMinimum;
  if (s.exclusiveMaximum === true) ((s.exclusiveMaximum = s.maximum), delete s.maximum);
  else if (s.exclusiveMaximum === false) delete s.exclusiveMaximum;
  if ("example" in s) {
    s.examples = [s.example];
    delete s.example;
  }
  if (s.nullable === true) s = withNull(s);
  delete s.nullable;
  return s;
}

/** `s`, which 3.0 made nullable, allowing null the 3.1 way. */
function withNull(s: Json): Json {
  const { nullable: _n, ...rest } = s;
  // A named schema made nullable where it is used: `allOf: [{$ref}]` (with the `type` 3.0 wanted beside `nullable`).
  if (Array.isArray(rest.allOf) && rest.allOf.length === 1 && rest.allOf[0].$ref && !rest.properties) {
    const { allOf, type: _t, ...annotations } = rest;
    return { ...annotations, anyOf: [allOf[0], { type: "null" }] };
  }
  if (typeof rest.type === "string") {
    rest.type = [rest.type, "null"];
    if (Array.isArray(rest.enum) && !rest.enum.includes(null)) rest.enum = [...rest.enum, null];
    return rest;
  }
  if (Array.isArray(rest.type)) {
    if (!rest.type.includes("null")) rest.type = [...rest.type, "null"];
    return rest;
  }
  if (Array.isArray(rest.anyOf)) return { ...rest, anyOf: [...rest.anyOf, { type: "null" }] };
  if (rest.oneOf) return { ...rest, oneOf: [...rest.oneOf, { type: "null" }] };
  // No type at all: it takes any value, null included.
  return rest;
}
