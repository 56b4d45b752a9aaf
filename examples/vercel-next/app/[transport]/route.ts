// app/[transport]/route.ts: the MCP endpoint (https://<your-app>.vercel.app/mcp), a Node.js function on Vercel.
import { createRoute } from '../../lib/mcp';

// Read once per instance (cold start); a missing setting fails the deployment's first request loudly.
const { handler } = createRoute(process.env);

export { handler as GET, handler as POST, handler as DELETE };
