"""estimate_cost: hardware catalog, model sizing and memory fit, time and money."""
