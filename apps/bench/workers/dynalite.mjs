// dynalite (pure-JS DynamoDB, in memory) in a process of its own for the bench's DynamoDB rows: listens on 127.0.0.1 at
// a random port and prints `DYNALITE_ENDPOINT=http://127.0.0.1:<port>`.
import dynalite from 'dynalite';

const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
server.listen(0, '127.0.0.1', () => {
  console.log(`DYNALITE_ENDPOINT=http://127.0.0.1:${server.address().port}`);
});
