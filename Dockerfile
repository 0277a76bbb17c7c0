# hf-train-mcp over streamable HTTP. Build with the local training stack: --build-arg EXTRAS=train
FROM python:3.12-slim
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 HF_TRAIN_HOME=/data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY server ./server
COPY templates ./templates
RUN pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}"
RUN useradd --create-home app && mkdir -p /data && chown app /data
USER app
VOLUME /data
EXPOSE 8000
# Off-localhost binding: set HF_TRAIN_AUTH_TOKEN (bearer auth) and put TLS in front.
ENTRYPOINT ["hf-train-mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "8000"]
