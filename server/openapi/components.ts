import { generateSchema } from "@anatine/zod-openapi";
import type { z } from "zod";
import { EXAMPLES } from "./examples.js";
import { NAMED_SCHEMAS, type NamedSchema } from "./schemas.js";

type Json = Record<string, any>;

export const schemaRef = (name: string) => `#/components/schemas/${name}`;

/** JSON with its keys sorted: two schemas are the same when these strings are. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]])) : v,
  );
}

const isComposite = (s: Json) => Boolean(s.oneOf || s.anyOf || s.allOf);

/**
 * OpenAPI 3.0 wants a `type` beside `nullable` (Redocly: `nullable-type-sibling`), which
 * @anatine/zod-openapi does not give `z.unknown()` nor a nullable union. An untyped schema
 * already takes any value, null included: it loses `nullable`. A nullable union carries it
 * on its first typed branch (one only: `oneOf` must not match null twice). A nullable
 * enum lists null among its values.
 */
function fixNullable(s: Json): void {
  if (s.nullable !== true) return;
  // 3.0.3: `nullable` adds null to the type, not to an `enum`, which must list it to allow it.
  if (Array.isArray(s.enum) && !s.enum.includes(null)) s.enum = [...s.enum, null];
  if (s.type) return;
  if (!isComposite(s)) {
    delete s.nullable;
    return;
  }
  const branches: Json[] = s.oneOf ?? s.anyOf ?? [];
  const typed = branches.find((b) => b.type && !b.$ref);
  if (!typed) throw new Error(`openapi: a nullable union without a typed branch: ${canonical(s)}`);
  typed.nullable = true;
  delete s.nullable;
}

export function fixNullableDeep(s: Json): Json {
  fixNullable(s);
  for (const [child] of children(s)) fixNullableDeep(child);
  return s;
}

/** Every schema object directly inside `s` (not `s` itself), with a way to replace it. */
function* children(s: Json): Generator<[Json, (v: Json) => void]> {
  if (s.properties) for (const k of Object.keys(s.properties)) yield [s.properties[k], (v) => (s.properties[k] = v)];
  if (s.items && typeof s.items === "object") yield [s.items, (v) => (s.items = v)];
  if (s.additionalProperties && typeof s.additionalProperties === "object") yield [s.additionalProperties, (v) => (s.additionalProperties = v)];
  if (s.not) yield [s.not, (v) => (s.not = v)];
  for (const key of ["oneOf", "anyOf", "allOf"] as const) {
    if (Array.isArray(s[key])) for (let i = 0; i < s[key].length; i++) yield [s[key][i], (v) => (s[key][i] = v)];
  }
}

/** Named schemas by the JSON Schema they generate, to find them again wherever the contract nests them. */
export class SchemaRegistry {
  private readonly byIdentity = new Map<z.ZodTypeAny, string>();
  private readonly byShape = new Map<string, string>();
  /** The same without the schemas' own descriptions; a shape two names share is left out (ambiguous). */
  private readonly byBareShape = new Map<string, string>();
  /** The generated JSON Schema of each name, before names replace what it nests. */
  private readonly generated = new Map<string, Json>();

  constructor(private readonly named: NamedSchema[] = NAMED_SCHEMAS) {
    for (const n of named) {
      if (this.generated.has(n.name)) throw new Error(`openapi: schema name ${n.name} given twice`);
      const json = fixNullableDeep(generateSchema(n.schema, !n.input) as Json);
      this.generated.set(n.name, json);
      this.byIdentity.set(n.schema, n.name);
      if (n.identityOnly) continue;
      const key = canonical(json);
      const other = this.byShape.get(key);
      if (other) throw new Error(`openapi: ${n.name} and ${other} are the same schema; name it once`);
      this.byShape.set(key, n.name);
      const { description: _own, ...bare } = json;
      const bareKey = canonical(bare);
      this.byBareShape.set(bareKey, this.byBareShape.has(bareKey) ? "" : n.name);
    }
    for (const [k, v] of this.byBareShape) if (!v) this.byBareShape.delete(k);
  }

  /** The name of this very zod object, if it has one. */
  nameOf(schema: unknown): string | undefined {
    return this.byIdentity.get(schema as z.ZodTypeAny);
  }

  /** `{ $ref }` to a named schema. */
  ref(name: string): Json {
    if (!this.generated.has(name)) throw new Error(`openapi: no schema named ${name}`);
    return { $ref: schemaRef(name) };
  }

  /**
   * Replaces, top-down, every part of `s` that is a named schema by a `$ref` to it (the
   * biggest first, so a `User` is one `$ref`, not a copy with a `$ref` to `Plan` inside).
   * A named schema made nullable, or described where it is used, becomes an `allOf` of the
   * `$ref` with the `nullable` (and its `type`, which 3.0 wants beside it) or the description.
   * `self`: the name `s` itself is published under, never replaced by a `$ref` to itself.
   */
  refify(s: Json, self?: string): Json {
    return this.replace(fixNullableDeep(s), self);
  }

  private replace(s: Json, self?: string): Json {
    if (s.$ref) return s;
    const match = self === undefined ? this.match(s) : undefined;
    if (match) return match;
    for (const [child, replace] of children(s)) replace(this.replace(child));
    return s;
  }

  private match(s: Json): Json | undefined {
    const exact = this.byShape.get(canonical(s));
    if (exact) return this.ref(exact);
    // The schema without what the place using it adds: `nullable`, or a description of its own.
    const { nullable, description, ...rest } = s;
    const name = this.byBareShape.get(canonical(rest));
    if (!name) return undefined;
    const target = this.generated.get(name)!;
    return {
      ...(nullable ? { type: target.type ?? "object", nullable: true } : {}),
      ...(description !== undefined && description !== target.description ? { description } : {}),
      allOf: [this.ref(name)],
    };
  }

  /** `components/schemas`: every named schema, nesting the others by `$ref`, with its description, example and discriminator mapping. */
  components(): Record<string, Json> {
    const out: Record<string, Json> = {};
    for (const n of this.named) {
      const json = this.refify(structuredClone(this.generated.get(n.name)!), n.name);
      if (n.description && !json.description) json.description = n.description;
      if (json.discriminator && json.oneOf) json.discriminator = { ...json.discriminator, mapping: this.mapping(json) };
      const example = EXAMPLES[n.name];
      if (example !== undefined) {
        const parsed = n.schema.safeParse(example);
        if (!parsed.success) throw new Error(`openapi: the example of ${n.name} does not parse: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
        json.example = example;
      }
      out[n.name] = json;
    }
    for (const name of Object.keys(EXAMPLES)) if (!(name in out)) throw new Error(`openapi: an example for ${name}, which is no schema`);
    return out;
  }

  /** A discriminated union's `mapping`: each branch's discriminator value to its named schema. */
  private mapping(union: Json): Record<string, string> {
    const prop: string = union.discriminator.propertyName;
    const mapping: Record<string, string> = {};
    for (const branch of union.oneOf as Json[]) {
      if (!branch.$ref) throw new Error(`openapi: a branch of a discriminated union has no name: ${canonical(branch)}`);
      const target = this.generated.get(branch.$ref.replace("#/components/schemas/", ""))!;
      const value = target.properties?.[prop]?.enum;
      if (!Array.isArray(value) || value.length !== 1) throw new Error(`openapi: ${branch.$ref} has no single ${prop}`);
      mapping[value[0]] = branch.$ref;
    }
    return mapping;
  }
}
