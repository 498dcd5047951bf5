"""The GPU host check (`make gpu-check`, run from a checkout: it runs tests/) and the offline kit it needs (`make gpu-kit`)."""
