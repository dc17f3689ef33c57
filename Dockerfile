# syntax=docker/dockerfile:1

# Build: compile and bundle src/ into dist/ (scripts/build.js).
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts ./scripts
COPY src ./src
RUN npm run build

# Production dependencies only, without npm's cache.
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
# Type declarations, source maps and docs of the dependencies are a third of their size and
# nothing at run time reads them.
RUN ["find", "node_modules", "-type", "f", "(", "-name", "*.d.ts", "-o", "-name", "*.d.cts", "-o", "-name", "*.d.mts", "-o", "-name", "*.map", "-o", "-name", "*.md", ")", "-delete"]

# The embedded engine's data directory, for a container run without DATABASE_URL: made here,
# because the runtime image has no shell to make it, and given to the runtime's user below.
FROM node:24-bookworm-slim AS data
RUN mkdir -p /data

# Runtime: Node.js 24 on distroless Debian (no shell, no package manager), as a non-root user.
FROM gcr.io/distroless/nodejs24-debian12:nonroot AS runtime
# Without DATABASE_URL the service runs the embedded engine with its data in /data, for trying
# things out: `docker run -v plants:/data ...` keeps it. Production sets DATABASE_URL.
# V8's heap bounds and the collection after a busy spell, the same as `npm start`'s
# (package.json): resident memory bounded as docs/operations.md says.
ENV NODE_ENV=production DATA_DIR=/data \
  NODE_OPTIONS="--max-semi-space-size=8 --max-old-space-size=128 --expose-gc"
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY migrations ./migrations
COPY --from=data --chown=65532:65532 /data /data
USER nonroot
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["/nodejs/bin/node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# The base image's entrypoint is node itself, so node is PID 1 and receives SIGTERM directly.
CMD ["dist/server.js"]
