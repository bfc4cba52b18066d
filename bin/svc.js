#!/usr/bin/env node
// The `svc` CLI (apps, keys, plans, owners). It runs the production build (dist/server/cli.js) in this
// process, building it first when the sources changed since (scripts/build-server.mjs).
import { buildServer, isFresh } from "../scripts/build-server.mjs";

process.setSourceMapsEnabled(true);
if (!isFresh()) await buildServer();
await import("../dist/server/cli.js");
