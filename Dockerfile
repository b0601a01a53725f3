# factlog service image: one image for API and worker nodes (`factlog serve --role api|worker|all`).
# The Node the Makefile fetches (its NODE_VERSION): package.json's engines asks for 24.6 at least,
# which the floating `node:24` tag of an old local image need not be.
ARG NODE_VERSION=24.21.0
FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# npm ci's postinstall applies them (patch-package; patches/README.md says what each changes and why)
# and puts PGlite's start-and-DDL functions first in its WebAssembly (the script says why).
COPY patches ./patches
COPY scripts/reorderPgliteWasm.ts ./scripts/
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY projections ./projections
RUN npx tsc -p tsconfig.json && npm prune --omit=dev

FROM node:${NODE_VERSION}-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
# bin/factlog.js says why (its shebang sets it when the CLI is run directly).
ENV MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY configs ./configs
COPY schemas ./schemas
USER node
EXPOSE 8080
ENTRYPOINT ["node", "--wasm-debug-mask-for-testing=15", "--max-semi-space-size=1", "--heap-growing-percent=30", "bin/factlog.js"]
CMD ["serve", "--role", "all"]
