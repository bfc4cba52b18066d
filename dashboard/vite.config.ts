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
    rolldownOptions: {
      output: {
        // Each page is its own chunk (React.lazy in src/routes.tsx); the libraries every page needs are shared
        // chunks of their own, which change only when the libraries do, so a new build of our code keeps them cached.
        // What only some pages use (uPlot, for the charts) stays with them.
        codeSplitting: {
          groups: [
            { name: "react", test: /node_modules[\\/](react|react-dom|scheduler|react-router|@remix-run|cookie-es)[\\/]/, priority: 3 },
            { name: "query", test: /node_modules[\\/]@tanstack[\\/]/, priority: 2 },
            { name: "schema", test: /node_modules[\\/](zod|@ts-rest)[\\/]/, priority: 1 },
            // Our components and helpers used by several pages: one chunk rather than a dozen tiny ones (not the chart, which brings uPlot).
            { name: "shared", test: (id) => /[\\/]dashboard[\\/]src[\\/](components|format|api)[\\/]/.test(id) && !/[\\/]Chart\.tsx$/.test(id), minShareCount: 2 },
          ],
        },
      },
    },
  },
});
