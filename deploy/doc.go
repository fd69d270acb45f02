// Package deploy holds ticketd's deployment files (this directory's Kubernetes manifest, Prometheus
// alert rules and Grafana dashboard, and the repository's Dockerfile and docker-compose.yml) and the
// tests that keep them correct without a container engine.
package deploy
