// /docs: the OpenAPI document (/openapi.json, fcgi/openapi.json) in Swagger
// UI, bundled from npm with the app, so the page needs nothing from outside
// the server. "Try it out" sends real requests to this server (whatever name
// the browser used to reach it, not the document's example address), with
// the browser's login cookie where the server asks for a token.
import SwaggerUI from 'swagger-ui-dist/swagger-ui-es-bundle.js';
import 'swagger-ui-dist/swagger-ui.css';
import './docs.css';

const options = {
  dom_id: '#api',
  deepLinking: true,
  docExpansion: 'list',
  defaultModelsExpandDepth: 0,
  displayRequestDuration: true,
  // No call to the public validator service: nothing leaves the LAN.
  validatorUrl: null,
  withCredentials: true,
};

fetch('/openapi.json', { headers: { Accept: 'application/json' } })
  .then((res) => (res.ok ? res.json() : Promise.reject(new Error(`/openapi.json: HTTP ${res.status}`))))
  .then((doc) => SwaggerUI({ ...options, spec: { ...doc, servers: [{ url: window.location.origin, description: 'this server' }] } }))
  .catch((e) => {
    const main = document.getElementById('api');
    main.textContent = `The API document could not be read (${e.message}). It is served at /openapi.json.`;
  });
