import { defineConfig, defaultClientConditions } from "vite";
import react from "@vitejs/plugin-react";

// Served by the service under /dashboard (server/dashboard/dashboard.ts): hashed asset names get a long cache there.
// `svc-source`: the contract workspace package exports its TypeScript sources under that condition.
export default defineConfig({
  base: "/dashboard/",
  plugins: [react()],
  resolve: { conditions: ["svc-source", ...defaultClientConditions] },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // Everything from our own origin: no data: URLs for fonts or images the CSP would have to allow.
    assetsInlineLimit: 0,
    sourcemap: false,
    chunkSizeWarningLimit: 800,
  },
});
