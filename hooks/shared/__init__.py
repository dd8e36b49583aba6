"""What every job kind shares: request reading, errors, conditions, Kubernetes shapes, copying."""
