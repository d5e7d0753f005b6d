// /docs: the OpenAPI document (/openapi.json, fcgi/openapi.json) in Swagger
// UI, bundled from npm with the app, so the page needs nothing from outside
// the server. "Try it out" sends real requests to this server, with the
// browser's login cookie where the server asks for a token.
import SwaggerUI from 'swagger-ui-dist/swagger-ui-es-bundle.js';
import 'swagger-ui-dist/swagger-ui.css';
import './docs.css';

SwaggerUI({
  url: '/openapi.json',
  dom_id: '#api',
  deepLinking: true,
  docExpansion: 'list',
  defaultModelsExpandDepth: 0,
  displayRequestDuration: true,
  // No call to the public validator service: nothing leaves the LAN.
  validatorUrl: null,
  withCredentials: true,
});
