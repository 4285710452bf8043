"""The interactive environment: SQL gateway, Python sandbox, episodes over a release, gymnasium env, HTTP server."""
