import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// The app is served by nginx from web/dist at the site root; deep links
// (/g/<id>) fall back to index.html there, so every asset URL is absolute.
// docs.html is the second page: /docs, the API reference (Swagger UI).
// `npm run dev` proxies the API to a running stack (tools/up), default
// http://127.0.0.1:8000, or MMH3_API.
const api = process.env.MMH3_API || 'http://127.0.0.1:8000';

export default defineConfig({
  base: '/',
  plugins: [react()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    // Swagger UI is one prebuilt bundle of ~1.7 MB, loaded by /docs only.
    chunkSizeWarningLimit: 2000,
    rollupOptions: { input: { main: 'index.html', docs: 'docs.html' }, checks: { pluginTimings: false } },
  },
  server: {
    proxy: {
      '/api': { target: api, changeOrigin: false },
      '/openapi.json': { target: api },
      '/login': { target: api },
    },
  },
  test: {
    environment: 'jsdom',
    include: ['test/**/*.test.{js,jsx}'],
    setupFiles: ['test/setup.js'],
    reporters: process.env.MMH3_PASSFAIL ? ['./test/pass-fail-reporter.js'] : ['default'],
  },
});
