"""imagekit's foundation: what every stage stands on and nothing of imagekit's own below it."""
